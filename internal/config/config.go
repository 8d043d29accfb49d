// Package config resolves fence's configuration and opens the coordinator it
// names.
//
// Every setting is a global flag of the fence command. Its value comes from,
// in order of precedence: the flag, the environment (FENCE_ and the flag name
// in upper case with '-' as '_': --state-dir is FENCE_STATE_DIR), the config
// files (keys are the flag names), and the default. The config files are
// merged key by key: /etc/fence/config.yaml, then
// $XDG_CONFIG_HOME/fence/config.yaml (~/.config/fence/config.yaml), then
// --config (env FENCE_CONFIG); a later file overrides only the keys it
// holds, as git and ssh do. A missing default file is skipped; an explicit
// config file that is missing, a malformed file, an unknown key and a value
// of the wrong type are errors.
//
// The etcd password is never a flag: it comes from FENCE_PASSWORD or from
// --password-file, a file readable by its owner only.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// Setting names: the global flags, also the config file's keys.
const (
	KeyStateDir          = "state-dir"
	KeyEndpoints         = "endpoints"
	KeyPrefix            = "prefix"
	KeyCACert            = "cacert"
	KeyCert              = "cert"
	KeyKey               = "key"
	KeyUser              = "user"
	KeyPasswordFile      = "password-file"
	KeyInsecureTransport = "insecure-transport"
	KeyDialTimeout       = "dial-timeout"
	KeyHolder            = "holder"
	KeyConfig            = "config"
	KeyVerbose           = "verbose"
	KeyQuiet             = "quiet"
	KeyLogFormat         = "log-format"
	KeyLogLevel          = "log-level"
	KeyPostgres          = "postgres"
	KeyPostgresSchema    = "postgres-schema"
	// KeyPassword is not a flag nor a file key: only FENCE_PASSWORD sets it.
	KeyPassword = "password"
)

// Defaults.
const (
	DefaultPrefix      = "/fence/"
	DefaultDialTimeout = 5 * time.Second
	// DefaultPostgresSchema is package postgres's default schema.
	DefaultPostgresSchema = "fence"
)

// EnvPassword is the environment variable holding the etcd password.
const EnvPassword = "FENCE_PASSWORD"

// fileKeys are the keys a config file may hold, in display order.
var fileKeys = []string{
	KeyStateDir, KeyEndpoints, KeyPrefix, KeyPostgres, KeyPostgresSchema, KeyCACert, KeyCert, KeyKey, KeyUser,
	KeyPasswordFile, KeyInsecureTransport, KeyDialTimeout, KeyHolder, KeyVerbose,
	KeyQuiet, KeyLogFormat, KeyLogLevel,
}

// Source says where a setting's value came from.
type Source string

// The sources, strongest first.
const (
	SourceFlag    Source = "flag"
	SourceEnv     Source = "env"
	SourceFile    Source = "file"
	SourceDefault Source = "default"
)

// ErrConfig is wrapped by every configuration error (exit 125).
var ErrConfig = errors.New("configuration")

// configError is a configuration error: it wraps ErrConfig without adding
// a prefix to its message.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrConfig }

func configErr(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...)}
}

// Config is the resolved configuration.
type Config struct {
	// StateDir is the local coordinator's directory ("" for its default).
	StateDir string
	// Endpoints, when set, select the etcd coordinator.
	Endpoints []string
	// Prefix is the etcd key prefix.
	Prefix string
	// CACert, Cert and Key are PEM files for TLS to etcd.
	CACert, Cert, Key string
	// User and Password authenticate to etcd.
	User, Password string
	// PasswordFile is where Password was read from, if anywhere.
	PasswordFile string
	// Postgres, when set, selects the PostgreSQL coordinator: a libpq URL
	// or DSN (PostgresConn is what fence connects with).
	Postgres string
	// PostgresSchema holds fence's tables in PostgreSQL.
	PostgresSchema string
	// InsecureTransport allows plaintext to a non-loopback etcd endpoint
	// or PostgreSQL host.
	InsecureTransport bool
	// DialTimeout bounds connecting to the coordinator.
	DialTimeout time.Duration
	// Holder is the holder identity ("" for coord.DefaultHolder()).
	Holder string
	// Files are the config files that were read, in the order they were
	// merged (the last one wins).
	Files []string
	// Verbose asks for progress messages on stderr.
	Verbose bool
	// Quiet keeps the expected outcomes of a wrapper (busy, already done,
	// frozen) off stderr; errors still print.
	Quiet bool
	// LogFormat ("text", "json") and LogLevel ("debug" ... "error") shape
	// the structured log on stderr.
	LogFormat, LogLevel string

	sources map[string]Source
	fileOf  map[string]string // the config file a key's value came from
	pwFile  string            // password-file setting, read lazily by Validate

	// endpointsSet: some source sets endpoints, perhaps to nothing
	// (endpointsText as written; endpointsBlank empty entries in it).
	endpointsSet   bool
	endpointsText  string
	endpointsBlank int

	postgresSet bool   // some source sets postgres, perhaps to nothing
	pgConn      string // the connection string, as Validate completed it
}

// AddFlags defines the global flags on fs.
func AddFlags(fs *pflag.FlagSet) {
	fs.String(KeyStateDir, "", "state directory of the local coordinator (default /var/lib/fence for root, else $XDG_STATE_HOME/fence)")
	fs.String(KeyEndpoints, "", "etcd endpoints, comma-separated; selects the etcd coordinator")
	fs.String(KeyPrefix, DefaultPrefix, "etcd key prefix; it ends in / (/fence means /fence/)")
	fs.String(KeyPostgres, "", "PostgreSQL URL or DSN; selects the PostgreSQL coordinator (no password in it: PGPASSWORD, ~/.pgpass or --password-file)")
	fs.String(KeyPostgresSchema, DefaultPostgresSchema, "PostgreSQL schema of fence's tables")
	fs.String(KeyCACert, "", "CA certificate (PEM) to verify etcd's TLS certificate")
	fs.String(KeyCert, "", "client certificate (PEM) for TLS to etcd")
	fs.String(KeyKey, "", "client key (PEM) for TLS to etcd")
	fs.String(KeyUser, "", "etcd user name (the password comes from FENCE_PASSWORD or --password-file)")
	fs.String(KeyPasswordFile, "", "file holding the etcd or PostgreSQL password (mode 0600 or stricter)")
	fs.Bool(KeyInsecureTransport, false, "allow plaintext to a non-loopback etcd endpoint, or PostgreSQL without a verified certificate")
	fs.Duration(KeyDialTimeout, DefaultDialTimeout, "how long to try to reach the coordinator")
	fs.String(KeyHolder, "", "holder identity (default HOSTNAME:PID; for acquire, the PID of the process that ran it)")
	fs.String(KeyConfig, "", "config file, merged over /etc/fence/config.yaml and $XDG_CONFIG_HOME/fence/config.yaml (its keys win)")
	fs.BoolP(KeyVerbose, "v", false, "print progress messages on stderr")
	fs.BoolP(KeyQuiet, "q", false, "print nothing on stderr for the expected outcomes of a wrapper (busy, already done, frozen); errors still print")
	fs.String(KeyLogFormat, "text", "format of log messages on stderr: text or json")
	fs.String(KeyLogLevel, "warn", "least severe log messages shown: debug, info, warn or error")
}

// EnvName is the environment variable of a setting: FENCE_STATE_DIR for
// state-dir.
func EnvName(key string) string {
	return "FENCE_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// Load resolves the configuration from the flags in fs (defined by AddFlags
// and parsed), the environment, the config file and the defaults. It checks
// types and syntax; Validate checks what connecting needs.
func Load(fs *pflag.FlagSet) (*Config, error) {
	v := viper.New()
	v.SetEnvPrefix("FENCE")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return nil, configErr("%v", err)
	}
	c := &Config{sources: map[string]Source{}, fileOf: map[string]string{}}
	fileMap, err := c.mergeFiles(v, fs)
	if err != nil {
		return nil, err
	}
	for _, k := range fileKeys {
		c.sources[k] = sourceOf(fs, k, fileMap)
	}
	for _, step := range []func() error{
		func() error { return c.readStrings(v, fs, fileMap) },
		func() error { return c.readCoordinator(fs, fileMap) },
		func() error { return c.readTyped(v) },
		c.checkPrefix,
		c.checkPaths,
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if pw, ok := os.LookupEnv(EnvPassword); ok && pw != "" {
		c.Password = pw
		c.sources[KeyPassword] = SourceEnv
	}
	return c, nil
}

// mergeFiles merges the config files into v, key by key: the system's, the
// user's, then the one named by --config or FENCE_CONFIG. It returns what
// they set.
func (c *Config) mergeFiles(v *viper.Viper, fs *pflag.FlagSet) (map[string]any, error) {
	c.sources[KeyConfig] = sourceOf(fs, KeyConfig, nil)
	explicit := v.GetString(KeyConfig)
	var paths []string
	for _, p := range defaultConfigFiles() {
		if explicit == "" || filepath.Clean(p) != filepath.Clean(explicit) {
			paths = append(paths, p)
		}
	}
	if explicit != "" {
		paths = append(paths, explicit)
	}
	fileMap := map[string]any{}
	for _, file := range paths {
		m, err := readFile(file, file == explicit)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue // a default file that does not exist
		}
		c.Files = append(c.Files, file)
		for k, x := range m {
			fileMap[k] = x
			c.fileOf[k] = file
		}
	}
	if err := v.MergeConfigMap(fileMap); err != nil {
		return nil, configErr("config files %s: %v", strings.Join(c.Files, ", "), err)
	}
	return fileMap, nil
}

// readStrings reads the settings that are strings. The prefix says which
// of the coordinator's namespaces: a variable set but empty
// (FENCE_PREFIX= from a template with an unset variable) is set, not
// absent, and is refused rather than passed over for the file or the
// default.
func (c *Config) readStrings(v *viper.Viper, fs *pflag.FlagSet, fileMap map[string]any) error {
	prefix, prefixSet := lookupSet(fs, KeyPrefix, fileMap, c.sources)
	if !prefixSet {
		prefix = DefaultPrefix
	}
	var err error
	str := func(key string, x any) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = toString(key, x, c.sources[key])
		return s
	}
	c.StateDir = str(KeyStateDir, v.Get(KeyStateDir))
	c.Prefix = str(KeyPrefix, prefix)
	for _, f := range []struct {
		key string
		to  *string
	}{
		{KeyPostgresSchema, &c.PostgresSchema}, {KeyCACert, &c.CACert}, {KeyCert, &c.Cert}, {KeyKey, &c.Key},
		{KeyUser, &c.User}, {KeyPasswordFile, &c.pwFile}, {KeyHolder, &c.Holder}, {KeyLogFormat, &c.LogFormat}, {KeyLogLevel, &c.LogLevel},
	} {
		*f.to = str(f.key, v.Get(f.key))
	}
	return err
}

// readCoordinator reads the endpoints and the PostgreSQL address, which
// say which coordinator: as for the prefix, a variable set but empty is
// set.
func (c *Config) readCoordinator(fs *pflag.FlagSet, fileMap map[string]any) error {
	endpoints, epSet := lookupSet(fs, KeyEndpoints, fileMap, c.sources)
	pg, pgSet := lookupSet(fs, KeyPostgres, fileMap, c.sources)
	var err error
	if c.Endpoints, c.endpointsText, c.endpointsBlank, err = toList(KeyEndpoints, endpoints, c.sources[KeyEndpoints]); err != nil {
		return err
	}
	c.Postgres, err = toString(KeyPostgres, pg, c.sources[KeyPostgres])
	c.endpointsSet, c.postgresSet = epSet, pgSet
	return err
}

// readTyped reads the settings that are booleans and durations.
func (c *Config) readTyped(v *viper.Viper) error {
	for _, f := range []struct {
		key string
		to  *bool
	}{{KeyInsecureTransport, &c.InsecureTransport}, {KeyVerbose, &c.Verbose}, {KeyQuiet, &c.Quiet}} {
		b, err := toBool(f.key, v.Get(f.key), c.sources[f.key])
		if err != nil {
			return err
		}
		*f.to = b
	}
	var err error
	c.DialTimeout, err = toDuration(KeyDialTimeout, v.Get(KeyDialTimeout), c.sources[KeyDialTimeout])
	return err
}

// checkPrefix refuses an empty prefix or one with white space at an end,
// and normalises it: "/fence" is "/fence/", one namespace, whichever way
// it is written.
func (c *Config) checkPrefix() error {
	switch {
	case c.Prefix == "":
		return configErr("%s must not be empty", where(KeyPrefix, c.sources[KeyPrefix]))
	case strings.TrimSpace(c.Prefix) != c.Prefix:
		return configErr("%s %q begins or ends with white space", where(KeyPrefix, c.sources[KeyPrefix]), c.Prefix)
	}
	c.Prefix = etcd.NormalPrefix(c.Prefix)
	return nil
}

// checkPaths refuses a path with a NUL byte.
func (c *Config) checkPaths() error {
	for _, s := range []string{c.StateDir, c.CACert, c.Cert, c.Key, c.pwFile} {
		if strings.ContainsRune(s, 0) {
			return configErr("a path contains a NUL byte")
		}
	}
	return nil
}

// lookupSet reads key from its strongest source as sourceOf does, except that
// a variable set to "" counts as set; it records the source in sources. set
// is false when no source names key (the flag's default applies).
func lookupSet(fs *pflag.FlagSet, key string, file map[string]any, sources map[string]Source) (v any, set bool) {
	v, sources[key] = lookup(fs, key, file, true)
	return v, sources[key] != SourceDefault
}

// lookup reads key from its strongest source: the flag when given, the
// variable when set (to "" too only when emptyEnv), the config files.
func lookup(fs *pflag.FlagSet, key string, file map[string]any, emptyEnv bool) (any, Source) {
	if f := fs.Lookup(key); f != nil && f.Changed {
		return f.Value.String(), SourceFlag
	}
	if s, ok := os.LookupEnv(EnvName(key)); ok && (emptyEnv || s != "") {
		return s, SourceEnv
	}
	if x, ok := file[key]; ok {
		return x, SourceFile
	}
	return nil, SourceDefault
}

// sourceOf says where key's value comes from.
func sourceOf(fs *pflag.FlagSet, key string, file map[string]any) Source {
	_, src := lookup(fs, key, file, false)
	return src
}

// SystemConfigFile is the system-wide config file, read first. Tests point
// it elsewhere.
var SystemConfigFile = "/etc/fence/config.yaml"

// defaultConfigFiles are the config files read whether or not they exist,
// in the order they are merged: the system's, then the user's.
func defaultConfigFiles() []string {
	files := []string{SystemConfigFile}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		files = append(files, filepath.Join(x, "fence", "config.yaml"))
	} else if h, err := os.UserHomeDir(); err == nil {
		files = append(files, filepath.Join(h, ".config", "fence", "config.yaml"))
	}
	return files
}

// readFile reads and checks a config file. A missing file is an error only
// when it was named explicitly; a default path that cannot hold one (a
// component of it is a file, not a directory) is a missing file too.
func readFile(path string, explicit bool) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && !explicit {
			return nil, nil
		}
		return nil, configErr("config file: %v", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, configErr("config file %s: %s", path, oneLine(err.Error()))
	}
	if m == nil {
		return map[string]any{}, nil // empty file
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch {
		case k == KeyPassword:
			return nil, configErr("config file %s: key %q is not allowed: give the password with %s or %s", path, k, EnvPassword, KeyPasswordFile)
		case k == KeyConfig:
			return nil, configErr("config file %s: key %q is not allowed in a config file", path, k)
		case !slices.Contains(fileKeys, k):
			return nil, configErr("config file %s: unknown key %q (keys are the global flag names: %s)", path, k, strings.Join(fileKeys, ", "))
		}
	}
	return m, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func where(key string, src Source) string {
	switch src {
	case SourceEnv:
		return EnvName(key)
	case SourceFile:
		return "config file key " + key
	}
	return "--" + key
}

func toString(key string, v any, src Source) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int, int64, float64, bool:
		if key == KeyHolder || key == KeyUser {
			return fmt.Sprint(x), nil
		}
	}
	return "", configErr("%s: want a string, got %v", where(key, src), v)
}

// toList splits a list setting (a comma-separated string or a list of
// strings) into its entries, without the white space around them. text is
// the setting as written, for messages; blank counts the entries that are
// empty or white space only, which are left out.
func toList(key string, v any, src Source) (out []string, text string, blank int, err error) {
	var parts []string
	switch x := v.(type) {
	case nil:
	case string:
		parts = strings.Split(x, ",")
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, "", 0, configErr("%s: want a list of strings, got %v", where(key, src), v)
			}
			parts = append(parts, s)
		}
	default:
		return nil, "", 0, configErr("%s: want a comma-separated string or a list, got %v", where(key, src), v)
	}
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		} else {
			blank++
		}
	}
	return out, strings.Join(parts, ","), blank, nil
}

func toBool(key string, v any, src Source) (bool, error) {
	switch x := v.(type) {
	case nil:
		return false, nil
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(x)
		if err == nil {
			return b, nil
		}
	}
	return false, configErr("%s: want true or false, got %q", where(key, src), fmt.Sprint(v))
}

func toDuration(key string, v any, src Source) (time.Duration, error) {
	switch x := v.(type) {
	case time.Duration:
		if x > 0 {
			return x, nil
		}
		return 0, configErr("%s: must be positive, got %v", where(key, src), x)
	case string:
		d, err := ParseDuration(x)
		if err != nil {
			return 0, configErr("%s: %v", where(key, src), err)
		}
		return d, nil
	}
	return 0, configErr("%s: want a duration with a unit such as 5s, got %v", where(key, src), v)
}

// MaxDuration is the longest duration ParseDuration accepts.
const MaxDuration = 100 * 365 * 24 * time.Hour

// ParseDuration parses a positive duration with a unit, as Go writes them
// ("500ms", "15s", "1m30s"). Zero, negative, unit-less, garbled and absurdly
// long (over 100 years) durations are errors.
func ParseDuration(s string) (time.Duration, error) {
	d, err := ParseDurationOrZero(s)
	if err != nil {
		return 0, err
	}
	if d == 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return d, nil
}

// ParseDurationOrZero is ParseDuration that also accepts zero ("0", "0s").
func ParseDurationOrZero(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty duration: want a number with a unit, such as 15s")
	}
	if len(s) > 64 {
		return 0, fmt.Errorf("duration %.20q... is too long", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && s != "0" {
			return 0, fmt.Errorf("duration %q has no unit: write %ss for seconds", s, s)
		}
		return 0, fmt.Errorf("invalid duration %q: want a number with a unit, such as 500ms, 15s or 1m30s", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	if d > MaxDuration {
		return 0, fmt.Errorf("duration %q is too long (at most 100 years)", s)
	}
	return d, nil
}
