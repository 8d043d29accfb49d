package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestModes(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("pass: %q %v", got, err)
	}
	if n := p.Forwarded(); n != 2 {
		t.Fatalf("Forwarded() = %d after one 2-byte answer", n)
	}
	for _, m := range []Mode{BlackholeBoth, BlackholeRequests, BlackholeResponses} {
		p.SetMode(m)
		if got, err := roundTrip(c, "lost", 200*time.Millisecond); err == nil {
			t.Fatalf("mode %d: got %q through a blackhole", m, got)
		}
	}
	if n := p.Forwarded(); n != 2 {
		t.Fatalf("Forwarded() = %d: blackholed answers counted", n)
	}
	// A fresh connection works again once the partition heals.
	p.SetMode(Pass)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	p.SetResponseDelay(150 * time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c2, "slow", 5*time.Second); err != nil || got != "slow\n" {
		t.Fatalf("delay: %q %v", got, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("response came after %v, before the 150ms delay", d)
	}
}

// proxied starts a proxy in front of an echo server and connects to it.
func proxied(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	return p, c
}

// TestHeldBytesArriveAfterHeal: what was sent across a blackhole arrives,
// in order, on the same connection once it passes again (a partition that
// heals), and the connection goes on working.
func TestHeldBytesArriveAfterHeal(t *testing.T) {
	for _, m := range []Mode{BlackholeBoth, BlackholeRequests, BlackholeResponses} {
		p, c := proxied(t)
		if got, err := roundTrip(c, "a", 5*time.Second); err != nil || got != "a\n" {
			t.Fatalf("pass: %q %v", got, err)
		}
		p.SetMode(m)
		if got, err := roundTrip(c, "held", 200*time.Millisecond); err == nil {
			t.Fatalf("mode %d: got %q through a blackhole", m, got)
		}
		p.SetMode(Pass)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(c)
		if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
			t.Fatalf("mode %d: after the heal got %q %v, want the held line", m, got, err)
		}
		if got, err := roundTrip(c, "b", 5*time.Second); err != nil || got != "b\n" {
			t.Fatalf("mode %d: the healed connection: %q %v", m, got, err)
		}
		c.Close()
		p.Close()
	}
}

// TestCloseWhileHeld: Close ends a proxy whose pipes hold bytes.
func TestCloseWhileHeld(t *testing.T) {
	p, c := proxied(t)
	defer c.Close()
	p.SetMode(BlackholeBoth)
	c.Write([]byte("held\n"))
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs while a pipe holds bytes")
	}
}
