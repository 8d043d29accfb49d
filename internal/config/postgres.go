package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The PostgreSQL coordinator's connection string is a libpq URL
// (postgres://...) or DSN (host=... dbname=...), resolved by pgx with the
// PG* variables and ~/.pgpass. fence reads it only to keep the password off
// argv and out of the command's environment, to verify TLS beyond loopback,
// and to add what fence's own settings say (the password file, the dial
// timeout).

// pgParam is one keyword=value of a connection string.
type pgParam struct{ key, val string }

// pgConnString is a connection string taken apart: a URL, or the
// keyword=value pairs of a DSN.
type pgConnString struct {
	u   *url.URL  // a URL
	kvs []pgParam // a DSN
}

func parsePostgres(s string) (*pgConnString, error) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("not a URL: %s", redactPostgresError(err, s))
		}
		return &pgConnString{u: u}, nil
	}
	p := &pgConnString{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			return nil, fmt.Errorf("want a URL (postgres://HOST/DB) or keyword=value pairs (host=HOST dbname=DB)")
		}
		key := strings.TrimSpace(rest[:eq])
		rest = strings.TrimLeft(rest[eq+1:], " \t\n\r\v\f")
		var val strings.Builder
		quoted := strings.HasPrefix(rest, "'")
		if quoted {
			rest = rest[1:]
		}
		i := 0
		for ; i < len(rest); i++ {
			ch := rest[i]
			if quoted && ch == '\'' || !quoted && strings.IndexByte(" \t\n\r\v\f", ch) >= 0 {
				break
			}
			if ch == '\\' && i+1 < len(rest) {
				i++
				ch = rest[i]
			}
			val.WriteByte(ch)
		}
		if quoted {
			if i == len(rest) {
				return nil, fmt.Errorf("unterminated quoted value of %q", key)
			}
			i++
		}
		p.kvs = append(p.kvs, pgParam{key, val.String()})
		rest = strings.TrimLeft(rest[i:], " \t\n\r\v\f")
	}
	return p, nil
}

// get is the value of a keyword (a URL's query parameter).
func (p *pgConnString) get(key string) (string, bool) {
	if p.u != nil {
		q := p.u.Query()
		return q.Get(key), q.Has(key)
	}
	v, ok := "", false
	for _, kv := range p.kvs {
		if kv.key == key {
			v, ok = kv.val, true
		}
	}
	return v, ok
}

// hasPassword reports whether the string itself holds a password.
func (p *pgConnString) hasPassword() bool {
	if p.u != nil && p.u.User != nil {
		if _, ok := p.u.User.Password(); ok {
			return true
		}
	}
	_, ok := p.get("password")
	return ok
}

// set sets a keyword (a URL's query parameter).
func (p *pgConnString) set(key, val string) {
	if p.u != nil {
		q := p.u.Query()
		q.Set(key, val)
		p.u.RawQuery = q.Encode()
		return
	}
	p.del(key)
	p.kvs = append(p.kvs, pgParam{key, val})
}

// del removes a keyword.
func (p *pgConnString) del(key string) {
	if p.u != nil {
		q := p.u.Query()
		if q.Has(key) {
			q.Del(key)
			p.u.RawQuery = q.Encode()
		}
		return
	}
	out := p.kvs[:0]
	for _, kv := range p.kvs {
		if kv.key != key {
			out = append(out, kv)
		}
	}
	p.kvs = out
}

// withPassword is a copy of p whose passwords (of a URL's user and of the
// password keyword), where it has any, are pw, or are removed when pw is "".
func (p *pgConnString) withPassword(pw string) *pgConnString {
	q := &pgConnString{kvs: append([]pgParam(nil), p.kvs...)}
	if p.u != nil {
		u := *p.u
		if _, ok := u.User.Password(); ok {
			u.User = url.User(u.User.Username())
			if pw != "" {
				u.User = url.UserPassword(u.User.Username(), pw)
			}
		}
		q.u = &u
	}
	if _, ok := p.get("password"); ok {
		q.del("password")
		if pw != "" {
			q.set("password", pw)
		}
	}
	return q
}

// redacted is the string with its password, if any, as <redacted>.
func (p *pgConnString) redacted() string {
	return strings.ReplaceAll(p.withPassword(Redacted).String(), url.QueryEscape(Redacted), Redacted)
}

func (p *pgConnString) String() string {
	if p.u != nil {
		return p.u.String()
	}
	parts := make([]string, len(p.kvs))
	for i, kv := range p.kvs {
		v := kv.val
		if v == "" || strings.ContainsAny(v, " \t\n\r\v\f'\\") {
			v = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
		}
		parts[i] = kv.key + "=" + v
	}
	return strings.Join(parts, " ")
}

// RedactPostgres is a connection string for display: its password, if any,
// as <redacted> (the string itself when it cannot be parsed and holds no
// '@' nor "password").
func RedactPostgres(s string) string {
	p, err := parsePostgres(s)
	if err != nil {
		if strings.Contains(s, "@") || strings.Contains(strings.ToLower(s), "password") {
			return Redacted
		}
		return s
	}
	return p.redacted()
}

// PostgresLocation is the connection string without its password: what
// the command of fence run gets in FENCE_POSTGRES, so that nested fence
// calls reach the same database (and find the password where this fence
// did: PGPASSWORD, ~/.pgpass).
func (c *Config) PostgresLocation() string {
	p, err := parsePostgres(c.Postgres)
	if err != nil {
		return ""
	}
	return p.withPassword("").String()
}

// PostgresConn is the connection string fence connects with, set by
// Validate: the one given, with the password of --password-file or
// FENCE_PASSWORD, verify-full TLS to a non-loopback host when no sslmode was
// named, and connect_timeout from --dial-timeout unless one was named.
func (c *Config) PostgresConn() string { return c.pgConn }

func redactPostgresError(err error, s string) string {
	msg := oneLine(err.Error())
	if p, perr := url.Parse(s); perr == nil && p.User != nil {
		if pw, ok := p.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, Redacted)
		}
	}
	return msg
}

// validatePostgres checks the PostgreSQL settings and sets pgConn.
func (c *Config) validatePostgres() error {
	w := where(KeyPostgres, c.sources[KeyPostgres])
	for _, f := range [...]struct{ key, hint string }{
		{KeyCACert, "sslrootcert=FILE"}, {KeyCert, "sslcert=FILE"}, {KeyKey, "sslkey=FILE"}, {KeyUser, "user=NAME"},
	} {
		if c.sources[f.key] == SourceFlag {
			return configErr("--%s applies to etcd only: for PostgreSQL put %s in the connection string", f.key, f.hint)
		}
	}
	p, err := parsePostgres(c.Postgres)
	if err != nil {
		return configErr("%s: %v", w, err)
	}
	if err := c.postgresPassword(p, w); err != nil {
		return err
	}
	if _, ok := p.get("connect_timeout"); !ok && os.Getenv("PGCONNECT_TIMEOUT") == "" && c.DialTimeout > 0 {
		p.set("connect_timeout", fmt.Sprint(int(math.Ceil(c.DialTimeout.Seconds()))))
	}
	if err := c.postgresTLS(p, w); err != nil {
		return err
	}
	c.pgConn = p.String()
	return nil
}

// postgresPassword puts the password (FENCE_PASSWORD or --password-file)
// in p, refusing one in --postgres itself (the process list shows it) and
// two passwords.
func (c *Config) postgresPassword(p *pgConnString, w string) error {
	if c.sources[KeyPostgres] == SourceFlag && p.hasPassword() {
		return configErr("--postgres holds a password, which any user of this host can read in the process list: give it with PGPASSWORD, ~/.pgpass or --password-file, or put the URL in %s or the config file", EnvName(KeyPostgres))
	}
	if err := c.readPassword(); err != nil {
		return err
	}
	if c.Password != "" {
		if p.hasPassword() {
			return configErr("%s holds a password and %s gives another: use one", w, passwordWhere(c))
		}
		p.set("password", c.Password)
	}
	return nil
}

// postgresTLS makes TLS verified beyond loopback: verify-full unless an
// sslmode is named; a named one that does not verify the server is
// refused (unless InsecureTransport).
func (c *Config) postgresTLS(p *pgConnString, w string) error {
	pc, err := pgconn.ParseConfig(p.String())
	if err != nil {
		return configErr("%s: %s", w, redactPostgresError(err, c.Postgres))
	}
	_, named := p.get("sslmode")
	if !named && os.Getenv("PGSSLMODE") == "" && !c.InsecureTransport && slices.ContainsFunc(pgHosts(pc), pgRemote) {
		p.set("sslmode", "verify-full")
		if pc, err = pgconn.ParseConfig(p.String()); err != nil {
			return configErr("%s: %s", w, redactPostgresError(err, c.Postgres))
		}
	}
	for _, h := range pgHosts(pc) {
		if c.InsecureTransport || !pgRemote(h) || (h.TLSConfig != nil && !h.TLSConfig.InsecureSkipVerify) {
			continue
		}
		return configErr("refusing PostgreSQL host %s without a verified TLS certificate: use sslmode=verify-full (with sslrootcert=CA.pem for a private CA), or --insecure-transport",
			net.JoinHostPort(h.Host, fmt.Sprint(h.Port)))
	}
	return nil
}

// pgHosts are the hosts pc connects to, the first and its fallbacks.
func pgHosts(pc *pgconn.Config) []*pgconn.FallbackConfig {
	return append([]*pgconn.FallbackConfig{{Host: pc.Host, Port: pc.Port, TLSConfig: pc.TLSConfig}}, pc.Fallbacks...)
}

// pgRemote reports whether a host pgx connects to is not this machine: a
// unix socket's directory, localhost, a loopback address.
func pgRemote(h *pgconn.FallbackConfig) bool {
	if strings.HasPrefix(h.Host, "/") || strings.EqualFold(h.Host, "localhost") {
		return false
	}
	ip := net.ParseIP(h.Host)
	return ip == nil || !ip.IsLoopback()
}

// passwordWhere names the password's source (readPassword refuses both).
func passwordWhere(c *Config) string {
	if c.pwFile != "" {
		return "--password-file"
	}
	return EnvPassword
}

// checkIdentifier checks a schema name (from w) as the coordinator will,
// whichever coordinator is used: fence postgres schema prints SQL for it
// without connecting.
func checkIdentifier(w, s string) error {
	if s == "" || len(s) > 63 || strings.ContainsAny(s, "\x00\"") || strings.TrimSpace(s) != s {
		return configErr("%s %q: want 1 to 63 bytes without quotes or surrounding white space", w, s)
	}
	return nil
}
