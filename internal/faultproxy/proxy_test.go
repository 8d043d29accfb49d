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
