package config

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// diagnoseTLS explains a failed TLS connection: the etcd client reports a
// refused certificate as a timeout, so when connecting failed and TLS is in
// use, one handshake with each endpoint finds the real reason. It returns nil
// when no endpoint shows a TLS problem.
func diagnoseTLS(ctx context.Context, endpoints []string, tc *tls.Config, timeout time.Duration) error {
	timeout = min(timeout, 3*time.Second)
	for _, raw := range endpoints {
		ep, err := parseEndpoint(raw)
		if err != nil || ep.host == "" {
			continue
		}
		hostport := net.JoinHostPort(ep.host, ep.port)
		if err := probeTLS(ctx, hostport, ep.host, tc, timeout); err != nil {
			return fmt.Errorf("%w: etcd %s: TLS: %s", coord.ErrUnavailable, hostport, oneLine(err.Error()))
		}
	}
	return nil
}

// probeTLS does one handshake with hostport and waits briefly for the
// server's verdict on the client certificate (sent after the handshake in
// TLS 1.3). Network errors are not TLS problems and give nil.
func probeTLS(ctx context.Context, hostport, host string, tc *tls.Config, timeout time.Duration) error {
	cfg := tc.Clone()
	cfg.ServerName = cmp.Or(cfg.ServerName, host)
	cfg.NextProtos = []string{"h2"}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		var (
			netErr  net.Error
			opErr   *net.OpError
			certErr *tls.CertificateVerificationError
			alert   tls.AlertError
		)
		switch {
		case errors.As(err, &certErr), errors.As(err, &alert):
			return err
		case errors.As(err, &opErr) && opErr.Op == "remote error":
			return err
		case errors.As(err, &netErr):
			return nil
		}
		if strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:") {
			return err
		}
		return nil
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(min(timeout, 500*time.Millisecond)))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		if strings.Contains(err.Error(), "remote error") || strings.Contains(err.Error(), "tls:") {
			return err
		}
	}
	return nil
}
