package config

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Backend names the coordinator a configuration selects: "postgres" when
// any source sets postgres, "etcd" when any source sets endpoints, even to
// nothing (which Validate refuses: it never falls back to local), else
// "local". When both postgres and endpoints are set, the one from the
// stronger source (Validate refuses two from equally strong ones).
func (c *Config) Backend() string {
	pg := c.Postgres != "" || c.isSet(KeyPostgres)
	ep := len(c.Endpoints) > 0 || c.isSet(KeyEndpoints)
	switch {
	case pg && (!ep || rank(c.sources[KeyPostgres]) <= rank(c.sources[KeyEndpoints])):
		return "postgres"
	case ep:
		return "etcd"
	}
	return "local"
}

// ShortenDialTimeout lowers DialTimeout to d when no source set it (flag,
// env, file): interactive commands wait less than the default for an
// unreachable coordinator, and keep a timeout that was asked for.
func (c *Config) ShortenDialTimeout(d time.Duration) {
	if c.sources[KeyDialTimeout] == SourceDefault && c.DialTimeout > d {
		c.DialTimeout = d
	}
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
// password file: endpoints, when set, that name at least one endpoint, each
// well-formed, none empty or given twice; no state directory beside them
// from as strong a source (see checkCoordinator); TLS flags that agree with
// the endpoints; plaintext only to loopback endpoints unless
// InsecureTransport; a user name without a password in it; a password from
// FENCE_PASSWORD or a password file readable by its owner only, not both.
// The errors wrap ErrConfig.
func (c *Config) Validate() error {
	if err := c.checkCoordinator(); err != nil {
		return err
	}
	if c.Backend() == "postgres" {
		return c.validatePostgres()
	}
	if c.sources[KeyPostgresSchema] == SourceFlag {
		return configErr("--%s needs --postgres (it applies to PostgreSQL only)", KeyPostgresSchema)
	}
	if len(c.Endpoints) == 0 {
		return c.checkLocalFlags()
	}
	if err := c.checkEndpoints(); err != nil {
		return err
	}
	if (c.Cert == "") != (c.Key == "") {
		return configErr("--cert and --key go together: give both or neither")
	}
	if strings.Contains(c.User, ":") {
		return configErr("--user must not contain a password (\"user:password\"): give the password with %s or --password-file", EnvPassword)
	}
	if err := c.readPassword(); err != nil {
		return err
	}
	switch {
	case c.User != "" && c.Password == "":
		return configErr("--user %s needs a password: set %s or --password-file", c.User, EnvPassword)
	case c.User == "" && c.Password != "":
		return configErr("a password is given (%s or --password-file) but no --user", EnvPassword)
	}
	return nil
}

// checkLocalFlags refuses, for the local coordinator, flags that apply to
// etcd or PostgreSQL only.
func (c *Config) checkLocalFlags() error {
	for _, k := range []string{KeyCACert, KeyCert, KeyKey, KeyUser} {
		if c.sources[k] == SourceFlag {
			return configErr("--%s needs --endpoints (it applies to etcd only)", k)
		}
	}
	if c.sources[KeyPasswordFile] == SourceFlag {
		return configErr("--%s needs --endpoints or --postgres (the local coordinator has no password)", KeyPasswordFile)
	}
	return nil
}

// checkEndpoints checks each etcd endpoint: well-formed, given once,
// plaintext only without TLS, and then only to loopback unless
// InsecureTransport.
func (c *Config) checkEndpoints() error {
	useTLS := c.UsesTLS()
	seen := map[string]string{}
	for _, raw := range c.Endpoints {
		ep, err := parseEndpoint(raw)
		if err != nil {
			return err
		}
		id := ep.id(useTLS)
		if first, ok := seen[id]; ok {
			return configErr("%s names one endpoint twice (%q and %q): give each once", where(KeyEndpoints, c.sources[KeyEndpoints]), first, raw)
		}
		seen[id] = raw
		switch {
		case useTLS && (ep.scheme == "http" || ep.scheme == "unix"):
			return configErr("endpoint %q is plaintext but TLS is configured: use https://", raw)
		case !useTLS && !ep.loopback && !c.InsecureTransport:
			return configErr("refusing plaintext to non-loopback endpoint %q: give --cacert (TLS) or --insecure-transport", raw)
		}
	}
	return nil
}

// readPassword reads --password-file, refused beside FENCE_PASSWORD.
func (c *Config) readPassword() error {
	if c.pwFile == "" {
		return nil
	}
	if c.Password != "" {
		return configErr("both %s and --password-file give a password: use one", EnvPassword)
	}
	pw, err := readPasswordFile(c.pwFile)
	if err != nil {
		return err
	}
	c.Password = pw
	c.sources[KeyPassword] = c.sources[KeyPasswordFile]
	c.fileOf[KeyPassword] = c.fileOf[KeyPasswordFile]
	return nil
}

// checkCoordinator refuses what would change the coordinator without a
// word: endpoints set to nothing (empty, blank, only commas: the local
// coordinator would be used instead of etcd), an empty entry among them,
// and a state directory from a source at least as strong as the endpoints'
// (both flags, both variables, both file keys, or a --state-dir flag beside
// FENCE_ENDPOINTS: fence cannot tell which coordinator was meant). A state
// directory from a weaker source than the endpoints (FENCE_STATE_DIR or the
// config file under an --endpoints flag) is overridden, as precedence says:
// it is how a nested fence call, or a host whose config file names a local
// state directory, reaches etcd by a flag.
func (c *Config) checkCoordinator() error {
	if err := c.checkPostgres(); err != nil {
		return err
	}
	if !c.isSet(KeyEndpoints) {
		return nil
	}
	src := c.sources[KeyEndpoints]
	w := where(KeyEndpoints, src)
	if len(c.Endpoints) == 0 {
		return configErr("%s %q names no endpoint: give HOST:PORT[,HOST:PORT...], or unset it for the local coordinator", w, c.endpointsText)
	}
	if c.endpointsBlank > 0 {
		return configErr("%s %q has an empty entry: give HOST:PORT[,HOST:PORT...] with no empty one", w, c.endpointsText)
	}
	return c.besideStateDir(KeyEndpoints, "etcd "+strings.Join(c.Endpoints, ","))
}

// besideStateDir refuses a state directory from a source at least as
// strong as key's, which names the coordinator what.
func (c *Config) besideStateDir(key, what string) error {
	if ss, src := c.sources[KeyStateDir], c.sources[key]; c.StateDir != "" && rank(ss) <= rank(src) {
		return configErr("%s and %s name two coordinators (local %s, %s): give one of them",
			where(KeyStateDir, ss), where(key, src), c.StateDir, what)
	}
	return nil
}

// checkPostgres is checkCoordinator for postgres: set to nothing, or
// beside endpoints or a state directory from a source as strong, is
// refused; a weaker one is overridden by precedence.
func (c *Config) checkPostgres() error {
	if !c.isSet(KeyPostgres) {
		return nil
	}
	src := c.sources[KeyPostgres]
	w := where(KeyPostgres, src)
	if strings.TrimSpace(c.Postgres) == "" {
		return configErr("%s %q names no database: give a URL (postgres://HOST/DB) or keyword=value pairs (host=HOST dbname=DB), or unset it for the local coordinator", w, c.Postgres)
	}
	pg := RedactPostgres(c.Postgres)
	if c.isSet(KeyEndpoints) && rank(c.sources[KeyEndpoints]) == rank(src) {
		return configErr("%s and %s name two coordinators (etcd %s, postgres %s): give one of them",
			where(KeyEndpoints, c.sources[KeyEndpoints]), w, c.endpointsText, pg)
	}
	if c.Backend() == "postgres" {
		return c.besideStateDir(KeyPostgres, "postgres "+pg)
	}
	return nil
}

// rank orders the sources, the strongest first.
func rank(s Source) int {
	switch s {
	case SourceFlag:
		return 0
	case SourceEnv:
		return 1
	case SourceFile:
		return 2
	}
	return 3
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
	port     string
	path     string // of a unix socket
	loopback bool
}

// id is what two spellings of one endpoint have in common: the scheme
// (none is http, or https with TLS), the host in lower case and the port,
// or a unix socket's path.
func (ep endpoint) id(useTLS bool) string {
	scheme := ep.scheme
	switch {
	case scheme == "unix" || scheme == "unixs":
		return "unix " + ep.path
	case scheme == "" && useTLS:
		scheme = "https"
	case scheme == "":
		scheme = "http"
	}
	return scheme + " " + strings.ToLower(ep.host) + " " + ep.port
}

const wantEndpoint = "want HOST:PORT, http://HOST:PORT, https://HOST:PORT or unix:///PATH"

func parseEndpoint(raw string) (endpoint, error) {
	if strings.IndexFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return endpoint{}, configErr("endpoint %q: white space or a control character inside it: %s", raw, wantEndpoint)
	}
	ep, hostport := endpoint{}, raw
	if i := strings.Index(raw, "://"); i >= 0 {
		var err error
		if ep, hostport, err = parseEndpointURL(raw, i); err != nil || ep.path != "" {
			return ep, err // a unix socket has no host and port
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return ep, configErr("endpoint %q: %s", raw, wantEndpoint)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
		return ep, configErr("endpoint %q: port %q is not a number from 1 to 65535", raw, port)
	}
	if !validHost(host) {
		return ep, configErr("endpoint %q: %q is not a host name nor an IP address", raw, host)
	}
	ep.host, ep.port = host, port
	ip := net.ParseIP(host)
	ep.loopback = strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback())
	return ep, nil
}

// parseEndpointURL reads an endpoint written as a URL ("://" at i): its
// scheme, and its HOST:PORT or (unix, unixs) its socket's path.
func parseEndpointURL(raw string, i int) (endpoint, string, error) {
	var ep endpoint
	u, err := url.Parse(raw)
	if err != nil {
		return ep, "", configErr("endpoint %q: %s", raw, oneLine(err.Error()))
	}
	ep.scheme = strings.ToLower(u.Scheme)
	switch ep.scheme {
	case "http", "https":
	case "unix", "unixs":
		ep.loopback = true
		ep.path = raw[i+3:]
		if ep.path == "" {
			return ep, "", configErr("endpoint %q: no socket path: %s", raw, wantEndpoint)
		}
		return ep, "", nil
	default:
		return ep, "", configErr("endpoint %q: unknown scheme %q (want http, https, unix or unixs)", raw, u.Scheme)
	}
	switch {
	case u.User != nil:
		return ep, "", configErr("endpoint %q: a user name is not allowed in it: give --user", raw)
	case u.Path != "" && u.Path != "/":
		return ep, "", configErr("endpoint %q: a path is not allowed", raw)
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(raw, "?#"):
		return ep, "", configErr("endpoint %q: a query or fragment is not allowed", raw)
	}
	return ep, u.Host, nil
}

// validHost accepts an IP address (an IPv6 one with a zone too) or a DNS
// name: letters, digits, '-', '_' and '.', not starting with '-' or '.'.
func validHost(h string) bool {
	if ip, _, _ := strings.Cut(h, "%"); net.ParseIP(ip) != nil {
		return true
	}
	if h == "" || len(h) > 253 || h[0] == '-' || h[0] == '.' {
		return false
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
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
	// File is the config file the value came from, when Source is file.
	File string `json:"file,omitempty" yaml:"file,omitempty"`
}

// Redacted is shown in place of a secret.
const Redacted = "<redacted>"

// Entries lists every setting with its effective value and its source,
// secrets redacted, and for a value from a config file, that file (the
// config row lists every file read, in merge order). defaultStateDir and
// defaultHolder fill in the values the defaults stand for.
func (c *Config) Entries(defaultStateDir, defaultHolder string) []Entry {
	src := func(k string) Source { return cmp.Or(c.sources[k], SourceDefault) }
	entry := func(k, v string) Entry {
		e := Entry{Key: k, Value: v, Source: src(k)}
		if e.Source == SourceFile {
			e.File = c.fileOf[k]
		}
		return e
	}
	pw := ""
	if c.Password != "" || c.sources[KeyPassword] == SourceEnv {
		pw = Redacted
	}
	cfgSrc := src(KeyConfig)
	if cfgSrc == SourceDefault && len(c.Files) > 0 {
		cfgSrc = SourceFile // found in the default search path
	}
	out := []Entry{{Key: KeyConfig, Value: strings.Join(c.Files, ","), Source: cfgSrc}}
	for _, s := range settings[1:] {
		var v string
		switch f := s.field(c).(type) {
		case *string:
			v = *f
		case *[]string:
			v = strings.Join(*f, ",")
		case *bool:
			v = fmt.Sprint(*f)
		case *time.Duration:
			v = f.String()
		}
		switch s.key {
		case KeyStateDir:
			v = cmp.Or(v, defaultStateDir)
		case KeyPostgres:
			v = RedactPostgres(v)
		case KeyHolder:
			v = cmp.Or(v, defaultHolder)
		}
		out = append(out, entry(s.key, v))
		if s.key == KeyPasswordFile {
			out = append(out, entry(KeyPassword, pw))
		}
	}
	return out
}
