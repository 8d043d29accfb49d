package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// cleanEnv removes every FENCE_ variable for the test and points the default
// config files (the system's and the user's) into an empty directory, which
// it returns: the user's file is DIR/fence/config.yaml, the system's
// DIR/etc/fence/config.yaml.
func cleanEnv(t *testing.T) string {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FENCE_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	old := SystemConfigFile
	SystemConfigFile = filepath.Join(dir, "etc", "fence", "config.yaml")
	t.Cleanup(func() { SystemConfigFile = old })
	return dir
}

func load(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("fence", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return Load(fs)
}

func mustLoad(t *testing.T, args ...string) *Config {
	t.Helper()
	c, err := load(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func sourceOfKey(c *Config, key string) Source {
	for _, e := range c.Entries("", "") {
		if e.Key == key {
			return e.Source
		}
	}
	return ""
}

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	xdg := cleanEnv(t)
	writeFile(t, filepath.Join(xdg, "fence", "config.yaml"), "state-dir: /from/file\nprefix: /file/\nholder: file-holder\ndial-timeout: 2s\n", 0o644)
	t.Setenv("FENCE_PREFIX", "/env/")
	t.Setenv("FENCE_HOLDER", "env-holder")
	c := mustLoad(t, "--holder", "flag-holder")

	if c.Holder != "flag-holder" || sourceOfKey(c, KeyHolder) != SourceFlag {
		t.Errorf("holder = %q from %s, want the flag", c.Holder, sourceOfKey(c, KeyHolder))
	}
	if c.Prefix != "/env/" || sourceOfKey(c, KeyPrefix) != SourceEnv {
		t.Errorf("prefix = %q from %s, want env", c.Prefix, sourceOfKey(c, KeyPrefix))
	}
	if c.StateDir != "/from/file" || sourceOfKey(c, KeyStateDir) != SourceFile {
		t.Errorf("state-dir = %q from %s, want the file", c.StateDir, sourceOfKey(c, KeyStateDir))
	}
	if c.DialTimeout != 2*time.Second {
		t.Errorf("dial-timeout = %v, want 2s from the file", c.DialTimeout)
	}
	if c.Verbose || sourceOfKey(c, KeyVerbose) != SourceDefault {
		t.Errorf("verbose = %v from %s, want the default", c.Verbose, sourceOfKey(c, KeyVerbose))
	}
	if strings.Join(c.Files, ",") != filepath.Join(xdg, "fence", "config.yaml") || sourceOfKey(c, KeyConfig) != SourceFile {
		t.Errorf("config files = %q from %s", c.Files, sourceOfKey(c, KeyConfig))
	}
}

func TestDefaults(t *testing.T) {
	cleanEnv(t)
	c := mustLoad(t)
	if c.Prefix != DefaultPrefix || c.DialTimeout != DefaultDialTimeout || c.Backend() != "local" || len(c.Files) != 0 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestEndpointsFromEnvFileAndFlag(t *testing.T) {
	dir := cleanEnv(t)
	t.Setenv("FENCE_ENDPOINTS", "127.0.0.1:2379, localhost:2380")
	c := mustLoad(t)
	if strings.Join(c.Endpoints, "|") != "127.0.0.1:2379|localhost:2380" || c.Backend() != "etcd" {
		t.Fatalf("env endpoints: %q", c.Endpoints)
	}
	os.Unsetenv("FENCE_ENDPOINTS")
	f := writeFile(t, filepath.Join(dir, "c.yaml"), "endpoints:\n  - 127.0.0.1:1\n  - 127.0.0.1:2\n", 0o644)
	c = mustLoad(t, "--config", f)
	if strings.Join(c.Endpoints, "|") != "127.0.0.1:1|127.0.0.1:2" {
		t.Fatalf("file endpoints: %q", c.Endpoints)
	}
	c = mustLoad(t, "--config", f, "--endpoints", "[::1]:9")
	if strings.Join(c.Endpoints, "|") != "[::1]:9" {
		t.Fatalf("flag endpoints: %q", c.Endpoints)
	}
}

func TestConfigFileErrors(t *testing.T) {
	dir := cleanEnv(t)
	for name, tc := range map[string]struct {
		content string
		want    string
	}{
		"malformed":      {"state-dir: [unclosed\n", "config file"},
		"unknown key":    {"state_dir: /x\n", `unknown key "state_dir"`},
		"password":       {"password: hunter2\n", `key "password" is not allowed`},
		"wrong type":     {"dial-timeout: 5\n", "dial-timeout"},
		"zero duration":  {"dial-timeout: 0s\n", "must be positive"},
		"bad bool":       {"insecure-transport: maybe\n", "want true or false"},
		"not a mapping":  {"- a\n- b\n", "config file"},
		"list of ints":   {"endpoints: [1, 2]\n", "list of strings"},
		"nested mapping": {"prefix: {a: b}\n", "want a string"},
	} {
		t.Run(name, func(t *testing.T) {
			f := writeFile(t, filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml"), tc.content, 0o644)
			_, err := load(t, "--config", f)
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line with %q wrapping ErrConfig", err, tc.want)
			}
		})
	}
	t.Run("explicit missing", func(t *testing.T) {
		_, err := load(t, "--config", filepath.Join(dir, "nope.yaml"))
		if err == nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("err = %v", err)
		}
		t.Setenv("FENCE_CONFIG", filepath.Join(dir, "nope.yaml"))
		if _, err = load(t); err == nil {
			t.Fatal("FENCE_CONFIG naming a missing file is accepted")
		}
	})
	t.Run("empty file", func(t *testing.T) {
		f := writeFile(t, filepath.Join(dir, "empty.yaml"), "", 0o644)
		if _, err := load(t, "--config", f); err != nil {
			t.Fatal(err)
		}
	})
}

// TestConfigFilesMerged: the user's file overrides the system's key by key,
// never replaces it. A user file holding only log-format once made fence
// ignore /etc/fence/config.yaml, and so take local locks while the other
// hosts used etcd.
func TestConfigFilesMerged(t *testing.T) {
	dir := cleanEnv(t)
	system := writeFile(t, SystemConfigFile, "endpoints: 127.0.0.1:2379\nprefix: /site/\nholder: sys\n", 0o644)
	user := writeFile(t, filepath.Join(dir, "fence", "config.yaml"), "log-format: json\nholder: me\n", 0o644)

	c := mustLoad(t)
	if c.Backend() != "etcd" || strings.Join(c.Endpoints, ",") != "127.0.0.1:2379" {
		t.Fatalf("coordinator %s %q: the user's file hid the system's endpoints", c.Backend(), c.Endpoints)
	}
	if c.LogFormat != "json" || c.Prefix != "/site/" || c.Holder != "me" {
		t.Errorf("log-format %q, prefix %q, holder %q; want json (user), /site/ (system), me (user)", c.LogFormat, c.Prefix, c.Holder)
	}
	if strings.Join(c.Files, ",") != system+","+user {
		t.Errorf("files read = %q, want the system's then the user's", c.Files)
	}
	fileOf := func(c *Config, key string) string {
		for _, e := range c.Entries("", "") {
			if e.Key == key {
				return string(e.Source) + " " + e.File
			}
		}
		return ""
	}
	for key, want := range map[string]string{KeyEndpoints: "file " + system, KeyPrefix: "file " + system, KeyHolder: "file " + user, KeyLogFormat: "file " + user, KeyLogLevel: "default "} {
		if got := fileOf(c, key); got != want {
			t.Errorf("%s from %q, want %q", key, got, want)
		}
	}

	// --config is merged last: it overrides the one key it holds.
	explicit := writeFile(t, filepath.Join(dir, "x.yaml"), "prefix: /mine/\n", 0o644)
	c = mustLoad(t, "--config", explicit)
	if c.Prefix != "/mine/" || fileOf(c, KeyPrefix) != "file "+explicit || c.Backend() != "etcd" || c.Holder != "me" || c.LogFormat != "json" {
		t.Errorf("with --config: prefix %q (%s), %s, holder %q, log-format %q", c.Prefix, fileOf(c, KeyPrefix), c.Backend(), c.Holder, c.LogFormat)
	}
	if strings.Join(c.Files, ",") != system+","+user+","+explicit {
		t.Errorf("files read = %q", c.Files)
	}
	// ... and the environment and flags still beat every file.
	t.Setenv("FENCE_PREFIX", "/env/")
	if c = mustLoad(t, "--config", explicit, "--holder", "flag"); c.Prefix != "/env/" || c.Holder != "flag" {
		t.Errorf("prefix %q, holder %q: want env and flag over the files", c.Prefix, c.Holder)
	}
	os.Unsetenv("FENCE_PREFIX")

	// A mistyped key in either file is refused, naming that file.
	for _, f := range []string{system, user} {
		good, _ := os.ReadFile(f)
		writeFile(t, f, string(good)+"log_level: debug\n", 0o644)
		if _, err := load(t); err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), f+`: unknown key "log_level"`) {
			t.Errorf("typo in %s: err = %v", f, err)
		}
		writeFile(t, f, string(good), 0o644)
	}
}

func TestEnvErrors(t *testing.T) {
	cleanEnv(t)
	for k, v := range map[string]string{"FENCE_DIAL_TIMEOUT": "5", "FENCE_INSECURE_TRANSPORT": "yes please"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			_, err := load(t)
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Fatalf("err = %v, want it to name %s", err, k)
			}
		})
	}
}

func validate(t *testing.T, args ...string) error {
	t.Helper()
	c, err := load(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return c.Validate()
}

func TestValidateTransport(t *testing.T) {
	dir := cleanEnv(t)
	ca := writeFile(t, filepath.Join(dir, "ca.pem"), "x", 0o644)
	for _, tc := range []struct {
		args []string
		want string // "" = accepted
	}{
		{[]string{"--endpoints", "127.0.0.1:2379"}, ""},
		{[]string{"--endpoints", "localhost:2379,[::1]:2379"}, ""},
		{[]string{"--endpoints", "http://127.0.0.1:2379"}, ""},
		{[]string{"--endpoints", "unix:///run/etcd.sock"}, ""},
		{[]string{"--endpoints", "10.0.0.1:2379"}, "refusing plaintext"},
		{[]string{"--endpoints", "127.0.0.1:2379,etcd.example:2379"}, "refusing plaintext"},
		{[]string{"--endpoints", "http://etcd.example:2379"}, "refusing plaintext"},
		{[]string{"--endpoints", "10.0.0.1:2379", "--insecure-transport"}, ""},
		{[]string{"--endpoints", "https://etcd.example:2379"}, ""},
		{[]string{"--endpoints", "etcd.example:2379", "--cacert", ca}, ""},
		{[]string{"--endpoints", "http://127.0.0.1:2379", "--cacert", ca}, "plaintext but TLS"},
		{[]string{"--endpoints", "etcd.example:2379", "--cacert", ca, "--cert", ca}, "--cert and --key"},
		{[]string{"--endpoints", "etcd.example"}, "want HOST:PORT"},
		{[]string{"--endpoints", "ftp://etcd.example:21"}, "unknown scheme"},
		{[]string{"--cacert", ca}, "needs --endpoints"},
		{[]string{"--endpoints", "127.0.0.1:2379", "--user", "root:hunter2"}, "must not contain a password"},
		{[]string{"--endpoints", "127.0.0.1:2379", "--user", "root"}, "needs a password"},
	} {
		err := validate(t, tc.args...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: refused: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: err = %v, want %q", tc.args, err, tc.want)
		case err != nil && !errors.Is(err, ErrConfig):
			t.Errorf("%q: %v does not wrap ErrConfig", tc.args, err)
		}
	}
}

// TestPasswordFileFromConfigFile: fence config names the config file the
// password's file came from.
func TestPasswordFileFromConfigFile(t *testing.T) {
	dir := cleanEnv(t)
	ep := []string{"--endpoints", "127.0.0.1:2379", "--user", "fence"}
	f := writeFile(t, filepath.Join(dir, "pw-cf"), "fromfile\n", 0o600)
	cf := writeFile(t, filepath.Join(dir, "pw.yaml"), "password-file: "+f+"\n", 0o600)
	c := mustLoad(t, append(ep, "--config", cf)...)
	if err := c.Validate(); err != nil || c.Password != "fromfile" {
		t.Fatalf("password %q, %v", c.Password, err)
	}
	for _, e := range c.Entries("", "") {
		if e.Key == KeyPassword && (e.Value != Redacted || e.Source != SourceFile || e.File != cf) {
			t.Fatalf("password entry %+v, want %s from file %s", e, Redacted, cf)
		}
	}
}

func TestPassword(t *testing.T) {
	dir := cleanEnv(t)
	ep := []string{"--endpoints", "127.0.0.1:2379", "--user", "fence"}

	t.Run("env", func(t *testing.T) {
		t.Setenv(EnvPassword, "s3cret")
		c := mustLoad(t, ep...)
		if err := c.Validate(); err != nil || c.Password != "s3cret" {
			t.Fatalf("password %q, %v", c.Password, err)
		}
		for _, e := range c.Entries("", "") {
			if strings.Contains(e.Value, "s3cret") {
				t.Fatalf("the password shows in %s", e.Key)
			}
			if e.Key == KeyPassword && (e.Value != Redacted || e.Source != SourceEnv) {
				t.Fatalf("password entry %+v", e)
			}
		}
	})
	t.Run("file", func(t *testing.T) {
		f := writeFile(t, filepath.Join(dir, "pw"), "fromfile\n", 0o600)
		c := mustLoad(t, append(ep, "--password-file", f)...)
		if err := c.Validate(); err != nil || c.Password != "fromfile" {
			t.Fatalf("password %q, %v", c.Password, err)
		}
	})
	t.Run("file readable by others", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o602} {
			f := writeFile(t, filepath.Join(dir, "pw-open"), "x\n", mode)
			err := validate(t, append(ep, "--password-file", f)...)
			if err == nil || !strings.Contains(err.Error(), "group or others") {
				t.Fatalf("mode %04o: err = %v", mode, err)
			}
		}
	})
	t.Run("empty file", func(t *testing.T) {
		f := writeFile(t, filepath.Join(dir, "pw-empty"), "\n", 0o600)
		if err := validate(t, append(ep, "--password-file", f)...); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("both", func(t *testing.T) {
		t.Setenv(EnvPassword, "a")
		f := writeFile(t, filepath.Join(dir, "pw2"), "b", 0o600)
		if err := validate(t, append(ep, "--password-file", f)...); err == nil || !strings.Contains(err.Error(), "use one") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("password without user", func(t *testing.T) {
		t.Setenv(EnvPassword, "a")
		if err := validate(t, "--endpoints", "127.0.0.1:2379"); err == nil || !strings.Contains(err.Error(), "no --user") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestTLSConfig(t *testing.T) {
	dir := cleanEnv(t)
	c := mustLoad(t, "--endpoints", "https://etcd.example:2379")
	tc, err := c.TLSConfig()
	if err != nil || tc == nil || tc.InsecureSkipVerify || tc.RootCAs != nil {
		t.Fatalf("https endpoint: %+v, %v (want verification against the system roots)", tc, err)
	}
	bad := writeFile(t, filepath.Join(dir, "ca.pem"), "not a pem", 0o644)
	c = mustLoad(t, "--endpoints", "etcd.example:2379", "--cacert", bad)
	if _, err := c.TLSConfig(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("bad CA: %v", err)
	}
	c = mustLoad(t, "--endpoints", "127.0.0.1:2379")
	if tc, err := c.TLSConfig(); tc != nil || err != nil {
		t.Fatalf("plaintext: %v %v", tc, err)
	}
}

func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"1ns": 1, "15s": 15 * time.Second, "1m30s": 90 * time.Second, "1.5h": 90 * time.Minute} {
		if d, err := ParseDuration(s); err != nil || d != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, d, err, want)
		}
	}
	for _, s := range []string{"", "0", "0s", "-1s", "15", "1.5", "s", "abc", "1x", " 1s", "1s ", "+-1s", "876000h1s", strings.Repeat("1", 70) + "s"} {
		if d, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", s, d)
		}
	}
	if d, err := ParseDurationOrZero("0"); err != nil || d != 0 {
		t.Errorf("ParseDurationOrZero(0) = %v, %v", d, err)
	}
	if _, err := ParseDurationOrZero("-0.5s"); err == nil {
		t.Error("ParseDurationOrZero(-0.5s) accepted")
	}
}

// FuzzParseDuration: never panics; an accepted duration is positive, at most
// MaxDuration, and its String form parses back to itself.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"15s", "0", "-1s", "1h2m3.5s", "9223372036854775807ns", "1e3s", ".5s", "5µs", "\x00s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error for %q: %v", s, err)
			}
			return
		}
		if d <= 0 || d > MaxDuration {
			t.Fatalf("ParseDuration(%q) = %v, out of range", s, d)
		}
		if back, err := ParseDuration(d.String()); err != nil || back != d {
			t.Fatalf("round trip of %q: %v -> %v, %v", s, d, back, err)
		}
	})
}

// TestEndpointsSetToNothing: endpoints set in any source (the flag, the
// variable, a file key) but naming no endpoint are refused, never read as
// "use the local coordinator"; so is an empty entry among endpoints. An
// unset variable is not set.
func TestEndpointsSetToNothing(t *testing.T) {
	dir := cleanEnv(t)
	check := func(t *testing.T, c *Config, want string) {
		t.Helper()
		if c.Backend() != "etcd" {
			t.Errorf("backend %s: endpoints set to nothing would change the coordinator", c.Backend())
		}
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("err = %v, want one line with %q", err, want)
		}
	}
	for _, v := range []string{"", " ", ",", ",,", " , ", "\t"} {
		t.Run("flag "+strconvQuote(v), func(t *testing.T) {
			c := mustLoad(t, "--endpoints", v)
			check(t, c, `--endpoints "`)
			check(t, c, "names no endpoint")
		})
		t.Run("env "+strconvQuote(v), func(t *testing.T) {
			t.Setenv("FENCE_ENDPOINTS", v)
			check(t, mustLoad(t), "FENCE_ENDPOINTS")
		})
		t.Run("file "+strconvQuote(v), func(t *testing.T) {
			f := writeFile(t, filepath.Join(dir, "ep.yaml"), "endpoints: \""+v+"\"\n", 0o644)
			check(t, mustLoad(t, "--config", f), "config file key endpoints")
		})
		t.Run("env over file "+strconvQuote(v), func(t *testing.T) {
			// viper takes an empty variable for an unset one and would
			// use the file's endpoints: the variable is the stronger.
			f := writeFile(t, filepath.Join(dir, "ep-good.yaml"), "endpoints: 127.0.0.1:2379\n", 0o644)
			t.Setenv("FENCE_ENDPOINTS", v)
			check(t, mustLoad(t, "--config", f), "FENCE_ENDPOINTS")
		})
	}
	for _, content := range []string{"endpoints: []\n", "endpoints:\n", "endpoints: [\"\", \" \"]\n"} {
		t.Run("file "+strconvQuote(content), func(t *testing.T) {
			f := writeFile(t, filepath.Join(dir, "ep-list.yaml"), content, 0o644)
			check(t, mustLoad(t, "--config", f), "names no endpoint")
		})
	}
	for _, v := range []string{"127.0.0.1:2379,", ",127.0.0.1:2379", "127.0.0.1:2379,,127.0.0.1:2380", "127.0.0.1:2379, ,127.0.0.1:2380"} {
		t.Run("empty entry "+strconvQuote(v), func(t *testing.T) {
			check(t, mustLoad(t, "--endpoints", v), "has an empty entry")
		})
	}
	t.Run("unset", func(t *testing.T) {
		os.Unsetenv("FENCE_ENDPOINTS")
		c := mustLoad(t)
		if c.Backend() != "local" || c.Validate() != nil {
			t.Fatalf("no endpoints anywhere: %s, %v", c.Backend(), c.Validate())
		}
	})
	t.Run("flag over an empty variable", func(t *testing.T) {
		t.Setenv("FENCE_ENDPOINTS", "")
		c := mustLoad(t, "--endpoints", "127.0.0.1:2379")
		if err := c.Validate(); err != nil || strings.Join(c.Endpoints, ",") != "127.0.0.1:2379" {
			t.Fatalf("%q: %v", c.Endpoints, err)
		}
	})
}

func strconvQuote(s string) string { return "\"" + s + "\"" }

// TestMalformedEndpoints: each is refused with one line naming it; white
// space around an endpoint is not part of it.
func TestMalformedEndpoints(t *testing.T) {
	cleanEnv(t)
	for v, want := range map[string]string{
		"127.0.0.1":                  "want HOST:PORT",
		"127.0.0.1:":                 "want HOST:PORT",
		":2379":                      "want HOST:PORT",
		"127.0.0.1:abc":              `port "abc" is not a number`,
		"127.0.0.1:0":                `port "0"`,
		"127.0.0.1:65536":            `port "65536"`,
		"127.0.0.1:+1":               `port "+1"`,
		"local host:2379":            "white space",
		"127.0.0.1:2379 127.0.0.1:1": "white space",
		"a\x01b:2379":                "control character",
		"exa$mple:2379":              "is not a host name",
		"-x:2379":                    "is not a host name",
		"http://127.0.0.1:2379/v3":   "a path is not allowed",
		"http://127.0.0.1:2379?x=1":  "query",
		"http://127.0.0.1:2379#x":    "fragment",
		"http://u:p@127.0.0.1:2379":  "a user name is not allowed",
		"ftp://127.0.0.1:21":         "unknown scheme",
		"unix://":                    "no socket path",
		"http://":                    "want HOST:PORT",
	} {
		c, err := load(t, "--endpoints", v)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--endpoints %q: err = %v, want one line with %q", v, err, want)
		}
	}
	for _, v := range []string{" 127.0.0.1:2379 ", "127.0.0.1:2379 , localhost:2380", "[::1]:2379", "[fe80::1%lo]:2379", "http://127.0.0.1:2379/", "unix:///run/etcd.sock", "etcd_1.local:2379"} {
		args := []string{"--endpoints", v}
		if strings.Contains(v, "etcd_1") || strings.Contains(v, "fe80") {
			args = append(args, "--insecure-transport")
		}
		c := mustLoad(t, args...)
		if err := c.Validate(); err != nil {
			t.Errorf("--endpoints %q refused: %v", v, err)
		}
	}
}

// TestDuplicateEndpoints: one endpoint given twice, in any spelling, is
// refused (a template that repeats a variable where it meant another has
// one endpoint fewer than its operator thinks): fence does not quietly
// de-duplicate.
func TestDuplicateEndpoints(t *testing.T) {
	cleanEnv(t)
	for _, v := range []string{
		"127.0.0.1:2379,127.0.0.1:2379",
		"127.0.0.1:2379,http://127.0.0.1:2379",
		"LOCALHOST:2379,localhost:2379",
		"127.0.0.1:2379, 127.0.0.1:2380 ,127.0.0.1:2379",
		"unix:///run/e.sock, unix:///run/e.sock",
	} {
		err := validate(t, "--endpoints", v)
		if err == nil || !strings.Contains(err.Error(), "names one endpoint twice") {
			t.Errorf("--endpoints %q: err = %v", v, err)
		}
	}
	// Two ports, or two schemes of one host, are two endpoints.
	if err := validate(t, "--endpoints", "127.0.0.1:2379,127.0.0.1:2380"); err != nil {
		t.Error(err)
	}
}

// TestStateDirWithEndpoints: a state directory and endpoints from sources
// of the same strength, or the state directory from the stronger one, are
// refused; endpoints from a stronger source than the state directory
// choose etcd, as precedence says (a nested call inside a local fence run
// has FENCE_STATE_DIR and may name etcd with --endpoints; a host's config
// file may name a state directory).
func TestStateDirWithEndpoints(t *testing.T) {
	dir := cleanEnv(t)
	both := writeFile(t, filepath.Join(dir, "both.yaml"), "state-dir: /from/file\nendpoints: 127.0.0.1:2379\n", 0o644)
	stateFile := writeFile(t, filepath.Join(dir, "state.yaml"), "state-dir: /from/file\n", 0o644)
	epFile := writeFile(t, filepath.Join(dir, "ep.yaml"), "endpoints: 127.0.0.1:2379\n", 0o644)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // "" = accepted, on etcd
	}{
		{"both flags", nil, []string{"--state-dir", "/x", "--endpoints", "127.0.0.1:2379"}, "--state-dir and --endpoints name two coordinators"},
		{"both variables", map[string]string{"FENCE_STATE_DIR": "/x", "FENCE_ENDPOINTS": "127.0.0.1:2379"}, nil, "FENCE_STATE_DIR and FENCE_ENDPOINTS name two coordinators"},
		{"both file keys", nil, []string{"--config", both}, "config file key state-dir and config file key endpoints"},
		{"state-dir flag, endpoints variable", map[string]string{"FENCE_ENDPOINTS": "127.0.0.1:2379"}, []string{"--state-dir", "/x"}, "--state-dir and FENCE_ENDPOINTS"},
		{"state-dir flag, endpoints file", nil, []string{"--config", epFile, "--state-dir", "/x"}, "--state-dir and config file key endpoints"},
		{"state-dir variable, endpoints file", map[string]string{"FENCE_STATE_DIR": "/x"}, []string{"--config", epFile}, "FENCE_STATE_DIR and config file key endpoints"},
		{"endpoints flag over FENCE_STATE_DIR", map[string]string{"FENCE_STATE_DIR": "/x"}, []string{"--endpoints", "127.0.0.1:2379"}, ""},
		{"endpoints flag over the file's state-dir", nil, []string{"--config", stateFile, "--endpoints", "127.0.0.1:2379"}, ""},
		{"endpoints variable over the file's state-dir", map[string]string{"FENCE_ENDPOINTS": "127.0.0.1:2379"}, []string{"--config", stateFile}, ""},
		{"an empty state-dir is none", map[string]string{"FENCE_STATE_DIR": ""}, []string{"--state-dir", "", "--endpoints", "127.0.0.1:2379"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := load(t, tc.args...)
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tc.want == "" && (err != nil || c.Backend() != "etcd"):
				t.Fatalf("refused or not etcd (%v): %v", c.Backend(), err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPrefixEndsInSlash: "/fence" is "/fence/" from every source, so two
// spellings are one namespace; an empty or space-padded prefix is refused,
// also from a variable set to nothing.
func TestPrefixEndsInSlash(t *testing.T) {
	dir := cleanEnv(t)
	if c := mustLoad(t, "--prefix", "/fence"); c.Prefix != "/fence/" {
		t.Errorf("--prefix /fence = %q", c.Prefix)
	}
	if c := mustLoad(t, "--prefix", "/fence/"); c.Prefix != "/fence/" {
		t.Errorf("--prefix /fence/ = %q", c.Prefix)
	}
	if c := mustLoad(t, "--prefix", "team"); c.Prefix != "team/" {
		t.Errorf("--prefix team = %q", c.Prefix)
	}
	f := writeFile(t, filepath.Join(dir, "p.yaml"), "prefix: /from/file\n", 0o644)
	if c := mustLoad(t, "--config", f); c.Prefix != "/from/file/" || sourceOfKey(c, KeyPrefix) != SourceFile {
		t.Errorf("file prefix = %q from %s", c.Prefix, sourceOfKey(c, KeyPrefix))
	}
	t.Setenv("FENCE_PREFIX", "/env")
	if c := mustLoad(t, "--config", f); c.Prefix != "/env/" || sourceOfKey(c, KeyPrefix) != SourceEnv {
		t.Errorf("env prefix = %q from %s", c.Prefix, sourceOfKey(c, KeyPrefix))
	}
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"-", []string{"--prefix", ""}, "--prefix must not be empty"},
		{"", nil, "FENCE_PREFIX must not be empty"},
		{"", []string{"--config", f}, "FENCE_PREFIX must not be empty"},
		{"-", []string{"--prefix", " /fence"}, "white space"},
		{"/fence/ ", nil, "white space"},
	} {
		if tc.env == "-" {
			os.Unsetenv("FENCE_PREFIX")
		} else {
			t.Setenv("FENCE_PREFIX", tc.env)
		}
		if _, err := load(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("FENCE_PREFIX=%q %q: err = %v, want %q", tc.env, tc.args, err, tc.want)
		}
	}
}

// TestDefaultConfigPathNotADirectory: a default config path that cannot hold
// a file (XDG_CONFIG_HOME/fence is a file, as where a binary called fence
// sits in that directory) is no config file, not an error; a --config that
// cannot be read still is.
func TestDefaultConfigPathNotADirectory(t *testing.T) {
	dir := cleanEnv(t)
	writeFile(t, filepath.Join(dir, "fence"), "not a directory", 0o755)
	if c := mustLoad(t); len(c.Files) != 0 {
		t.Errorf("files read = %q, want none", c.Files)
	}
	if _, err := load(t, "--config", filepath.Join(dir, "fence", "config.yaml")); err == nil {
		t.Error("an explicit --config under a file loaded without error")
	}
}
