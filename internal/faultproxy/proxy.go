// Package faultproxy is a TCP proxy for fault tests: it forwards loopback
// connections to a target and can, at any moment, blackhole the requests
// (client to server), the responses (server to client) or both, or delay the
// responses. A blackholed direction keeps the connection open and holds
// its bytes, as a network partition does: nothing arrives, no RST, no FIN,
// and what was sent meanwhile (a FIN included) arrives, in order, once the
// direction passes again, as TCP's retransmissions deliver it after a
// partition heals. (An earlier version dropped the bytes, which no network
// does to a TCP stream: a healed HTTP/2 connection then missed frames, a
// flow-control window update among them, and stalled for good.)
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with the traffic.
type Mode int

const (
	Pass               Mode = iota // forward both directions
	BlackholeBoth                  // hold everything
	BlackholeRequests              // hold client to server
	BlackholeResponses             // hold server to client
)

// Proxy forwards connections from Addr() to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  Mode
	delay time.Duration // added to each response chunk
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	forwarded atomic.Int64 // response bytes passed to clients

	tagger  func(head []byte) string // names a connection's sender (SetTagger)
	blocked map[string]bool          // senders whose connections are blackholed

	changed chan struct{} // closed (and replaced) when the mode or a block changes
	closed  chan struct{} // closed by Close
}

// New starts a proxy on a free loopback port in front of target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{},
		changed: make(chan struct{}), closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Forwarded is the number of response bytes passed on to clients so far:
// which of several proxies carries a client's traffic.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

// SetMode changes what happens to traffic from now on, on every connection.
func (p *Proxy) SetMode(m Mode) { p.mu.Lock(); p.mode = m; p.notify(); p.mu.Unlock() }

// notify wakes the pipes that hold bytes (p.mu held).
func (p *Proxy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// SetResponseDelay delays every chunk of server-to-client traffic by d.
func (p *Proxy) SetResponseDelay(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

// SetTagger makes the proxy name each new connection's sender by its first
// bytes (up to the end of the first HTTP header block, 8 KiB at most):
// SetBlocked then blackholes one sender's connections only.
func (p *Proxy) SetTagger(f func(head []byte) string) { p.mu.Lock(); p.tagger = f; p.mu.Unlock() }

// SetBlocked blackholes (or passes again) both directions of every
// connection whose tag (SetTagger) is tag.
func (p *Proxy) SetBlocked(tag string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked == nil {
		p.blocked = map[string]bool{}
	}
	p.blocked[tag] = on
	p.notify()
}

func (p *Proxy) state(tag string) (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tag != "" && p.blocked[tag] {
		return BlackholeBoth, p.delay, p.changed
	}
	return p.mode, p.delay, p.changed
}

// pass waits until one direction of a connection of tag passes, and
// returns its delay; false when the proxy was closed meanwhile.
func (p *Proxy) pass(tag string, response bool) (time.Duration, bool) {
	for {
		mode, delay, changed := p.state(tag)
		held := mode == BlackholeBoth ||
			(mode == BlackholeRequests && !response) ||
			(mode == BlackholeResponses && response)
		if !held {
			return delay, true
		}
		select {
		case <-changed:
		case <-p.closed:
			return 0, false
		}
	}
}

// head reads a new connection's first bytes for the tagger: up to the end
// of the first HTTP header block, 8 KiB, or a pause of 200 ms.
func head(c net.Conn) []byte {
	buf := make([]byte, 0, 8<<10)
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	for len(buf) < cap(buf) && !bytes.Contains(buf, []byte("\r\n\r\n")) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	return buf
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.mu.Lock()
			tagger := p.tagger
			p.mu.Unlock()
			var tag string
			if tagger != nil {
				first := head(client)
				tag = tagger(first)
				_, ok := p.pass(tag, false)
				if ok {
					_, err = server.Write(first)
				}
				if !ok || err != nil {
					client.Close()
					server.Close()
					return
				}
			}
			p.wg.Add(2)
			go p.pipe(server, client, false, tag)
			go p.pipe(client, server, true, tag)
		}()
	}
}

// pipe copies src to dst, holding or delaying according to the mode. While
// it holds a chunk it reads no more: the sender's TCP window fills, as
// across a partition.
func (p *Proxy) pipe(dst, src net.Conn, response bool, tag string) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.track(dst, false)
		p.track(src, false)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		// The bytes, and the end of the connection, arrive once this
		// direction passes.
		delay, ok := p.pass(tag, response)
		if !ok {
			return
		}
		if n > 0 {
			if response && delay > 0 {
				time.Sleep(delay)
			}
			if response {
				// Counted before the write, so that a client that has
				// read the answer sees it counted.
				p.forwarded.Add(int64(n))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection: close both sides
			return
		}
	}
}
