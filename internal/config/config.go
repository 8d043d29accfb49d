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

	// endpointsText is endpoints as written; endpointsBlank counts the
	// empty entries in it.
	endpointsText  string
	endpointsBlank int

	pgConn string // the connection string, as Validate completed it
}

// A setting is a global flag, a config file key (but config) and a FENCE_
// variable. field is where Load puts its value (nil: config); its type is the
// flag's. A variable set but empty (FENCE_PREFIX= from a template with an
// unset variable) is set, not absent, for the settings that say which
// coordinator or which of its namespaces (emptySet): it is refused rather
// than passed over for the file or the default.
type setting struct {
	key, short, def, help string
	emptySet              bool
	field                 func(*Config) any
}

// settings are the global flags, in the order fence config shows them.
var settings = []setting{
	{KeyConfig, "", "", "config file, merged over /etc/fence/config.yaml and $XDG_CONFIG_HOME/fence/config.yaml (its keys win)", false, nil},
	{KeyStateDir, "", "", "state directory of the local coordinator (default /var/lib/fence for root, else $XDG_STATE_HOME/fence)", false, func(c *Config) any { return &c.StateDir }},
	{KeyEndpoints, "", "", "etcd endpoints, comma-separated; selects the etcd coordinator", true, func(c *Config) any { return &c.Endpoints }},
	{KeyPrefix, "", DefaultPrefix, "etcd key prefix; it ends in / (/fence means /fence/)", true, func(c *Config) any { return &c.Prefix }},
	{KeyPostgres, "", "", "PostgreSQL URL or DSN; selects the PostgreSQL coordinator (no password in it: PGPASSWORD, ~/.pgpass or --password-file)", true, func(c *Config) any { return &c.Postgres }},
	{KeyPostgresSchema, "", DefaultPostgresSchema, "PostgreSQL schema of fence's tables", false, func(c *Config) any { return &c.PostgresSchema }},
	{KeyCACert, "", "", "CA certificate (PEM) to verify etcd's TLS certificate", false, func(c *Config) any { return &c.CACert }},
	{KeyCert, "", "", "client certificate (PEM) for TLS to etcd", false, func(c *Config) any { return &c.Cert }},
	{KeyKey, "", "", "client key (PEM) for TLS to etcd", false, func(c *Config) any { return &c.Key }},
	{KeyUser, "", "", "etcd user name (the password comes from FENCE_PASSWORD or --password-file)", false, func(c *Config) any { return &c.User }},
	{KeyPasswordFile, "", "", "file holding the etcd or PostgreSQL password (mode 0600 or stricter)", false, func(c *Config) any { return &c.pwFile }},
	{KeyInsecureTransport, "", "", "allow plaintext to a non-loopback etcd endpoint, or PostgreSQL without a verified certificate", false, func(c *Config) any { return &c.InsecureTransport }},
	{KeyDialTimeout, "", "", "how long to try to reach the coordinator", false, func(c *Config) any { return &c.DialTimeout }},
	{KeyHolder, "", "", "holder identity (default HOSTNAME:PID; for acquire, the PID of the process that ran it)", false, func(c *Config) any { return &c.Holder }},
	{KeyVerbose, "v", "", "print progress messages on stderr", false, func(c *Config) any { return &c.Verbose }},
	{KeyQuiet, "q", "", "print nothing on stderr for the expected outcomes of a wrapper (busy, already done, frozen); errors still print", false, func(c *Config) any { return &c.Quiet }},
	{KeyLogFormat, "", "text", "format of log messages on stderr: text or json", false, func(c *Config) any { return &c.LogFormat }},
	{KeyLogLevel, "", "warn", "least severe log messages shown: debug, info, warn or error", false, func(c *Config) any { return &c.LogLevel }},
}

// AddFlags defines the global flags on fs.
func AddFlags(fs *pflag.FlagSet) {
	for _, s := range settings {
		var field any = new(string)
		if s.field != nil {
			field = s.field(&Config{})
		}
		switch field.(type) {
		case *bool:
			fs.BoolP(s.key, s.short, false, s.help)
		case *time.Duration:
			fs.Duration(s.key, DefaultDialTimeout, s.help)
		default:
			fs.String(s.key, s.def, s.help)
		}
	}
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
	for _, s := range settings[1:] {
		x, src := lookup(fs, s.key, fileMap, s.emptySet)
		c.sources[s.key] = src
		if !s.emptySet || src == SourceDefault {
			x = v.Get(s.key)
		}
		if err := c.read(s.key, s.field(c), x, src); err != nil {
			return nil, err
		}
	}
	if err := c.checkPrefix(); err != nil {
		return nil, err
	}
	if err := checkIdentifier(where(KeyPostgresSchema, c.sources[KeyPostgresSchema]), c.PostgresSchema); err != nil {
		return nil, err
	}
	for _, s := range []string{c.StateDir, c.CACert, c.Cert, c.Key, c.pwFile} {
		if strings.ContainsRune(s, 0) {
			return nil, configErr("a path contains a NUL byte")
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
	_, c.sources[KeyConfig] = lookup(fs, KeyConfig, nil, false)
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

// read converts x, the value of key from src, into field.
func (c *Config) read(key string, field, x any, src Source) error {
	var err error
	switch f := field.(type) {
	case *string:
		*f, err = toString(key, x, src)
	case *[]string:
		*f, c.endpointsText, c.endpointsBlank, err = toList(key, x, src)
	case *bool:
		*f, err = toBool(key, x, src)
	case *time.Duration:
		*f, err = toDuration(key, x, src)
	}
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
		case !slices.ContainsFunc(settings, func(s setting) bool { return s.key == k }):
			return nil, configErr("config file %s: unknown key %q (keys are the global flag names: %s)", path, k, fileKeys())
		}
	}
	return m, nil
}

// fileKeys lists the keys a config file may hold.
func fileKeys() string {
	var keys []string
	for _, s := range settings[1:] {
		keys = append(keys, s.key)
	}
	return strings.Join(keys, ", ")
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
	// viper gives a duration flag, as every source, as a string.
	x, ok := v.(string)
	if !ok {
		return 0, configErr("%s: want a duration with a unit such as 5s, got %v", where(key, src), v)
	}
	d, err := ParseDuration(x)
	if err != nil {
		return 0, configErr("%s: %v", where(key, src), err)
	}
	return d, nil
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

// isSet reports whether some source sets key, perhaps to nothing.
func (c *Config) isSet(key string) bool {
	return c.sources[key] != "" && c.sources[key] != SourceDefault
}
