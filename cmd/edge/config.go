package main

// Where each flag's value comes from (CONTRACT.md section 12): the command
// line, then the environment (EDGE_ + the flag's name in upper snake case),
// then the TOML file of --config (keys are the flag names), then the
// default. The flags are the standard library's; the environment and the
// file are applied to each flag the command line left alone, through the
// flag's own Set, so a value means the same wherever it is written. The TOML
// is read with BurntSushi/toml.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/openengine/edge/internal/redact"
)

// envPrefix starts the name of every environment variable edge reads.
const envPrefix = "EDGE_"

// clientTokenEnv is the bearer token of `edge call` and `edge subscribe`;
// the gateway's configuration ignores it, so that one shell can run both.
const clientTokenEnv = "EDGE_TOKEN"

// redacted is what `edge config` prints in place of a secret.
const redacted = "<redacted>"

// removedFlags are flags that no longer exist, with what replaced them, for
// the error that names them in the environment or the --config file.
var removedFlags = map[string]string{
	"pprof-listen": "use --admin-listen ADDR --admin-pprof",
}

// config is the configuration read from the command line, the environment
// and the --config file. Immutable after loadConfig.
type config struct {
	opts *options
	fs   *flag.FlagSet
	// from says where each flag's value came from: "--NAME", "EDGE_NAME" or
	// the --config file's path. A flag not in it has its default.
	from map[string]string
	// secret names the flags whose values `edge config` redacts.
	secret map[string]bool
}

// kind is how a flag's value is spelled in TOML.
type kind int

const (
	kindString   kind = iota // a TOML string
	kindInt                  // a TOML integer
	kindBool                 // a TOML boolean
	kindDuration             // a TOML string that time.ParseDuration reads ("30s")
	kindList                 // a TOML array of strings (a repeatable flag)
)

// kindOf tells the kind of f from the type of its value.
func kindOf(f *flag.Flag) kind {
	switch f.Value.(flag.Getter).Get().(type) {
	case int:
		return kindInt
	case bool:
		return kindBool
	case time.Duration:
		return kindDuration
	case []string:
		return kindList
	}
	return kindString
}

// want says what a TOML value of kind k must be, for errors.
func (k kind) want() string {
	return [...]string{
		kindString:   "a string",
		kindInt:      "an integer",
		kindBool:     "true or false",
		kindDuration: `a duration string such as "30s"`,
		kindList:     "an array of strings",
	}[k]
}

// envName is the environment variable of the flag name: EDGE_MAX_CONN_TASKS
// for max-conn-tasks.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// loadConfig reads the flags from args, then every EDGE_* variable of
// environ for the flags args did not set, then the --config file (named on
// the command line or by EDGE_CONFIG) for the flags neither set, and checks
// the result. Every error names the flag and where its value came from: an
// EDGE_* variable or a file key that names no flag is an error too.
func loadConfig(args, environ []string, stderr io.Writer) (*config, error) {
	o := &options{}
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(stderr, fs) }
	c := &config{opts: o, fs: fs, from: make(map[string]string)}
	c.secret = defineFlags(fs, o)
	if err := unknownFlags(fs, args); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { c.from[f.Name] = "--" + f.Name })
	var errs []error
	errs = append(errs, c.applyEnv(environ)...)
	if o.configFile != "" {
		errs = append(errs, c.applyFile(o.configFile)...)
	}
	if len(errs) == 0 { // checking values that did not all arrive says little
		for _, err := range o.check() {
			errs = append(errs, c.annotate(err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bad configuration:\n%w", err)
	}
	return c, nil
}

// applyEnv sets, from the EDGE_* variables of environ, every flag that the
// command line left alone. A list is a TOML array of strings, or one string
// for a list of one.
func (c *config) applyEnv(environ []string) []error {
	vars := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, envPrefix) {
			vars[k] = v // the last wins, as with os.Getenv
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		v := vars[k]
		if k == clientTokenEnv {
			continue // edge call's and edge subscribe's, not a flag of the gateway
		}
		name := strings.ToLower(strings.ReplaceAll(k[len(envPrefix):], "_", "-"))
		f := c.fs.Lookup(name)
		switch {
		case f == nil:
			errs = append(errs, unknown("environment variable "+k, name))
			continue
		case envName(name) != k:
			errs = append(errs, fmt.Errorf("unknown environment variable %s: the variable of --%s is %s", k, name, envName(name)))
			continue
		}
		if _, onCommandLine := c.from[name]; onCommandLine {
			continue
		}
		values := []string{v}
		if kindOf(f) == kindList && strings.HasPrefix(strings.TrimSpace(v), "[") {
			var doc struct{ V []string }
			if _, err := toml.Decode("V = "+v, &doc); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s: want a TOML array of strings, or one string: %v", k, err))
				continue
			}
			values = doc.V
		}
		if err := set(f, values); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q: bad value for --%s: %v", k, redact.URLs(v), name, err))
			continue
		}
		c.from[name] = k
	}
	return errs
}

// applyFile sets, from the TOML file path, every flag that neither the
// command line nor the environment set. The file's values are checked all
// the same: a bad value in the file is an error even where it is overridden.
func (c *config) applyFile(path string) []error {
	data, err := os.ReadFile(path)
	if err != nil {
		return []error{fmt.Errorf("config: %w", err)}
	}
	var doc map[string]any
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&doc)
	if err != nil {
		return []error{fmt.Errorf("config %s: %w", path, err)}
	}
	var errs []error
	seen := make(map[string]bool)
	// Keys in the order they appear, so that the errors do too.
	for _, key := range md.Keys() {
		if len(key) != 1 || seen[key[0]] {
			continue // inside a table (the table's own key is reported), or again ([[x]])
		}
		name := key[0]
		seen[name] = true
		v := doc[name]
		f := c.fs.Lookup(name)
		switch {
		case f == nil:
			errs = append(errs, fmt.Errorf("config %s: %w", path, unknown("key "+strconv.Quote(name), name)))
			continue
		case name == "config":
			errs = append(errs, fmt.Errorf("config %s: key %q: a config file cannot name another", path, name))
			continue
		}
		values, err := fromTOML(kindOf(f), v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config %s: key %q: %v", path, name, err))
			continue
		}
		if _, taken := c.from[name]; taken {
			continue
		}
		if err := set(f, values); err != nil {
			errs = append(errs, fmt.Errorf("config %s: key %q = %s: %v", path, name, redact.URLs(tomlText(v)), err))
			continue
		}
		c.from[name] = path
	}
	return errs
}

// unknown is the error for a variable or key (what) that maps to no flag.
func unknown(what, name string) error {
	if hint, ok := removedFlags[name]; ok {
		return fmt.Errorf("%s: --%s was removed: %s", what, name, hint)
	}
	return fmt.Errorf("unknown %s: edge has no flag --%s", what, name)
}

// fromTOML turns a decoded TOML value into the strings to Set on a flag of
// kind k, refusing a value of the wrong type.
func fromTOML(k kind, v any) ([]string, error) {
	bad := func() ([]string, error) {
		return nil, fmt.Errorf("want %s, got %s", k.want(), tomlText(v))
	}
	switch k {
	case kindInt:
		if n, ok := v.(int64); ok {
			return []string{strconv.FormatInt(n, 10)}, nil
		}
	case kindBool:
		if b, ok := v.(bool); ok {
			return []string{strconv.FormatBool(b)}, nil
		}
	case kindString, kindDuration:
		if s, ok := v.(string); ok {
			return []string{s}, nil
		}
	case kindList:
		a, ok := v.([]any)
		if !ok {
			return bad()
		}
		out := make([]string, 0, len(a))
		for _, e := range a {
			s, ok := e.(string)
			if !ok {
				return bad()
			}
			out = append(out, s)
		}
		return out, nil
	}
	return bad()
}

// tomlText spells a decoded TOML value for an error.
func tomlText(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a table"
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(map[string]any{"v": v}); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(strings.TrimPrefix(b.String(), "v = "))
}

// set gives f its values: one for a plain flag, the whole list for a
// repeatable one. Numbers and durations are read here first, so that the
// error says what is wrong rather than the flag package's "parse error".
func set(f *flag.Flag, values []string) error {
	k := kindOf(f)
	for _, v := range values {
		switch k {
		case kindInt:
			if _, err := strconv.Atoi(v); err != nil {
				return fmt.Errorf("want %s: %w", k.want(), err)
			}
		case kindDuration:
			if _, err := time.ParseDuration(v); err != nil {
				return fmt.Errorf("want %s: %w", k.want(), err)
			}
		case kindBool:
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("want %s: %w", k.want(), err)
			}
		}
		if err := f.Value.Set(v); err != nil {
			return err
		}
	}
	return nil
}

// annotate adds to a check error where the value it is about came from, when
// not the command line: check's errors start with the flag's name.
func (c *config) annotate(err error) error {
	word, _, _ := strings.Cut(err.Error(), " ")
	from := c.from[strings.TrimPrefix(word, "--")]
	switch {
	case from == "" || strings.HasPrefix(from, "--"):
		return err
	case strings.HasPrefix(from, envPrefix):
		return fmt.Errorf("%w (from environment variable %s)", err, from)
	}
	return fmt.Errorf("%w (from config %s)", err, from)
}

// writeTOML writes every flag with its effective value as TOML, valid as a
// --config file, each followed by where the value came from when not the
// default. Secrets are printed as "<redacted>" (an empty one as ""), and the
// userinfo of every URL in a value (--upstream, --nats) as USER:***@
// (CONTRACT.md section 12).
func (c *config) writeTOML(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("# The effective configuration of edge: every flag with its value. Precedence:\n" +
		"# command line, then EDGE_* environment variables, then the --config file, then\n" +
		"# the default; a comment says where a value that is not the default came from.\n" +
		"# Valid as a --config file.\n")
	if f := c.opts.configFile; f != "" {
		fmt.Fprintf(&b, "# Read with --config %s.\n", f)
	}
	var err error
	c.fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || err != nil {
			return
		}
		v := f.Value.(flag.Getter).Get()
		switch x := v.(type) {
		case time.Duration:
			v = x.String()
		case string:
			v = redact.URLs(x) // --nats nats://u:***@host
		case []string:
			v = redact.Args(x) // --upstream a=ws://u:***@host/; never nil
		}
		if c.secret[f.Name] && f.Value.String() != "" {
			v = redacted
		}
		var line bytes.Buffer
		if err = toml.NewEncoder(&line).Encode(map[string]any{f.Name: v}); err != nil {
			return
		}
		b.Write(bytes.TrimRight(line.Bytes(), "\n"))
		if from := c.from[f.Name]; from != "" {
			b.WriteString("  # from " + from)
		}
		b.WriteByte('\n')
	})
	if err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// scrubEnv removes edge's own variables (EDGE_*) from the process's
// environment once they are read, so that exec upstreams do not inherit
// them: a child `edge --stdio` would otherwise take its parent's
// EDGE_UPSTREAM, start its own children, and so on.
func scrubEnv(environ []string) {
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix) {
			_ = os.Unsetenv(k)
		}
	}
}

// runConfig is `edge config`: it reads the configuration as edge would
// (args, environ, the --config file), checks it, including what start-up
// checks before it serves (the registry file, the upstreams, the routes),
// and prints it as TOML on stdout. An invalid configuration is an error
// (exit status 2) and prints nothing.
func runConfig(args, environ []string, stdout, stderr io.Writer) error {
	c, err := loadConfig(args, environ, stderr)
	if err != nil {
		return err
	}
	_, ups, err := prepare(c.opts)
	if err != nil {
		return err
	}
	ups.Close() // never started: nothing runs
	return c.writeTOML(stdout)
}
