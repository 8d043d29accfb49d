package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// Backend names the coordinator a configuration selects.
func (c *Config) Backend() string {
	if len(c.Endpoints) > 0 {
		return "etcd"
	}
	return "local"
}

// UsesTLS reports whether the etcd connection uses TLS: when a certificate
// flag is given or an endpoint is https://.
func (c *Config) UsesTLS() bool {
	if c.CACert != "" || c.Cert != "" || c.Key != "" {
		return true
	}
	for _, e := range c.Endpoints {
		if strings.HasPrefix(strings.ToLower(e), "https://") || strings.HasPrefix(strings.ToLower(e), "unixs://") {
			return true
		}
	}
	return false
}

// Validate checks what connecting to the coordinator needs, and reads the
// password file: well-formed endpoints; TLS flags that agree with the
// endpoints; plaintext only to loopback endpoints unless InsecureTransport;
// a user name without a password in it; a password from FENCE_PASSWORD or a
// password file readable by its owner only, not both. The errors wrap
// ErrConfig.
func (c *Config) Validate() error {
	if len(c.Endpoints) == 0 {
		for _, k := range []string{KeyCACert, KeyCert, KeyKey, KeyUser, KeyPasswordFile} {
			if c.sources[k] == SourceFlag {
				return configErr("--%s needs --endpoints (it applies to etcd only)", k)
			}
		}
		return nil
	}
	useTLS := c.UsesTLS()
	for _, raw := range c.Endpoints {
		ep, err := parseEndpoint(raw)
		if err != nil {
			return err
		}
		switch {
		case useTLS && (ep.scheme == "http" || ep.scheme == "unix"):
			return configErr("endpoint %q is plaintext but TLS is configured: use https://", raw)
		case !useTLS && !ep.loopback && !c.InsecureTransport:
			return configErr("refusing plaintext to non-loopback endpoint %q: give --cacert (TLS) or --insecure-transport", raw)
		}
	}
	if (c.Cert == "") != (c.Key == "") {
		return configErr("--cert and --key go together: give both or neither")
	}
	if strings.Contains(c.User, ":") {
		return configErr("--user must not contain a password (\"user:password\"): give the password with %s or --password-file", EnvPassword)
	}
	if c.pwFile != "" {
		if c.Password != "" {
			return configErr("both %s and --password-file give a password: use one", EnvPassword)
		}
		pw, err := readPasswordFile(c.pwFile)
		if err != nil {
			return err
		}
		c.Password, c.PasswordFile = pw, c.pwFile
		c.sources[KeyPassword] = c.sources[KeyPasswordFile]
	}
	switch {
	case c.User != "" && c.Password == "":
		return configErr("--user %s needs a password: set %s or --password-file", c.User, EnvPassword)
	case c.User == "" && c.Password != "":
		return configErr("a password is given (%s or --password-file) but no --user", EnvPassword)
	}
	return nil
}

// readPasswordFile reads a password file: a regular file that group and
// others can neither read nor write. One trailing newline is dropped.
func readPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", configErr("password file: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", configErr("password file: %v", err)
	}
	if !st.Mode().IsRegular() {
		return "", configErr("password file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", configErr("password file %s is accessible by group or others (mode %04o): chmod 600 it", path, perm)
	}
	buf := make([]byte, 4097)
	n, _ := f.Read(buf)
	if n > 4096 {
		return "", configErr("password file %s is too large", path)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(buf[:n]), "\n"), "\r")
	if pw == "" {
		return "", configErr("password file %s is empty", path)
	}
	return pw, nil
}

type endpoint struct {
	scheme   string // "", http, https, unix, unixs
	host     string
	loopback bool
}

func parseEndpoint(raw string) (endpoint, error) {
	var ep endpoint
	hostport := raw
	if i := strings.Index(raw, "://"); i >= 0 {
		u, err := url.Parse(raw)
		if err != nil {
			return ep, configErr("endpoint %q: %v", raw, err)
		}
		ep.scheme = strings.ToLower(u.Scheme)
		switch ep.scheme {
		case "http", "https":
			hostport = u.Host
		case "unix", "unixs":
			ep.loopback = true
			return ep, nil
		default:
			return ep, configErr("endpoint %q: unknown scheme %q (want http, https, unix or unixs)", raw, u.Scheme)
		}
		if u.Path != "" && u.Path != "/" {
			return ep, configErr("endpoint %q: a path is not allowed", raw)
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return ep, configErr("endpoint %q: want HOST:PORT, http://HOST:PORT or https://HOST:PORT", raw)
	}
	ep.host = host
	if strings.EqualFold(host, "localhost") {
		ep.loopback = true
	} else if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		ep.loopback = true
	}
	return ep, nil
}

// TLSConfig builds the TLS configuration for etcd: nil when TLS is not used,
// else one that verifies the server's certificate against --cacert (or the
// system's roots) and presents --cert/--key when given.
func (c *Config) TLSConfig() (*tls.Config, error) {
	if !c.UsesTLS() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return nil, configErr("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configErr("--cacert %s holds no PEM certificate", c.CACert)
		}
		tc.RootCAs = pool
	}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, configErr("--cert/--key: %s", oneLine(err.Error()))
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Entry is one setting as `fence config` shows it.
type Entry struct {
	Key    string `json:"key" yaml:"key"`
	Value  string `json:"value" yaml:"value"`
	Source Source `json:"source" yaml:"source"`
}

// Redacted is shown in place of a secret.
const Redacted = "<redacted>"

// Entries lists every setting with its effective value and its source,
// secrets redacted. defaultStateDir and defaultHolder fill in the values the
// defaults stand for.
func (c *Config) Entries(defaultStateDir, defaultHolder string) []Entry {
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	src := func(k string) Source {
		if s, ok := c.sources[k]; ok {
			return s
		}
		return SourceDefault
	}
	pw := ""
	if c.Password != "" || c.sources[KeyPassword] == SourceEnv {
		pw = Redacted
	}
	cfgFile := c.File
	cfgSrc := src(KeyConfig)
	if cfgSrc == SourceDefault && c.File != "" {
		cfgSrc = SourceFile // found in the default search path
	}
	return []Entry{
		{KeyConfig, cfgFile, cfgSrc},
		{KeyStateDir, or(c.StateDir, defaultStateDir), src(KeyStateDir)},
		{KeyEndpoints, strings.Join(c.Endpoints, ","), src(KeyEndpoints)},
		{KeyPrefix, c.Prefix, src(KeyPrefix)},
		{KeyCACert, c.CACert, src(KeyCACert)},
		{KeyCert, c.Cert, src(KeyCert)},
		{KeyKey, c.Key, src(KeyKey)},
		{KeyUser, c.User, src(KeyUser)},
		{KeyPasswordFile, c.pwFile, src(KeyPasswordFile)},
		{KeyPassword, pw, src(KeyPassword)},
		{KeyInsecureTransport, fmt.Sprint(c.InsecureTransport), src(KeyInsecureTransport)},
		{KeyDialTimeout, c.DialTimeout.String(), src(KeyDialTimeout)},
		{KeyHolder, or(c.Holder, defaultHolder), src(KeyHolder)},
		{KeyVerbose, fmt.Sprint(c.Verbose), src(KeyVerbose)},
		{KeyQuiet, fmt.Sprint(c.Quiet), src(KeyQuiet)},
		{KeyLogFormat, c.LogFormat, src(KeyLogFormat)},
		{KeyLogLevel, c.LogLevel, src(KeyLogLevel)},
	}
}
