package main

// Tests of the configuration from the command line, EDGE_* variables and the
// --config file (CONTRACT.md section 12), and of `edge config`.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/openengine/edge/internal/poll"
)

// writeFile writes a --config file into the test's temp dir and returns its
// path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigPrecedence: a flag's value comes from the command line, else the
// environment, else the --config file, else its default, for a scalar
// (max-conn-tasks) and a repeatable flag (upstream). A list on the command
// line replaces the environment's or the file's, it does not add to it; so
// does the environment's to the file's.
func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "edge.toml", `
max-conn-tasks = 111
upstream = ["a=tcp://127.0.0.1:9001", "b=exec:edge --stdio"]
`)
	const (
		envScalar = "EDGE_MAX_CONN_TASKS=222"
		envList   = `EDGE_UPSTREAM=["c=tcp://127.0.0.1:9003", "c=tcp://127.0.0.1:9004"]`
	)
	flagScalar := []string{"--max-conn-tasks", "333"}
	flagList := []string{"--upstream", "d=tcp://127.0.0.1:9005"}
	fileList := []string{"a=tcp://127.0.0.1:9001", "b=exec:edge --stdio"}
	envListValues := []string{"c=tcp://127.0.0.1:9003", "c=tcp://127.0.0.1:9004"}
	flagListValues := []string{"d=tcp://127.0.0.1:9005"}
	tests := []struct {
		name      string
		file      bool
		env, flag bool
		wantN     int
		wantFrom  string // where max-conn-tasks and upstream came from
		wantList  []string
	}{
		{name: "default", wantN: 256, wantFrom: "", wantList: []string{}},
		{name: "file", file: true, wantN: 111, wantFrom: file, wantList: fileList},
		{name: "env", env: true, wantN: 222, wantFrom: "EDGE_", wantList: envListValues},
		{name: "env over file", file: true, env: true, wantN: 222, wantFrom: "EDGE_", wantList: envListValues},
		{name: "flag", flag: true, wantN: 333, wantFrom: "--", wantList: flagListValues},
		{name: "flag over file", file: true, flag: true, wantN: 333, wantFrom: "--", wantList: flagListValues},
		{name: "flag over env", env: true, flag: true, wantN: 333, wantFrom: "--", wantList: flagListValues},
		{name: "flag over env over file", file: true, env: true, flag: true, wantN: 333, wantFrom: "--", wantList: flagListValues},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args, environ []string
			if tt.file {
				args = append(args, "--config", file)
			}
			if tt.env {
				environ = append(environ, envScalar, envList, "PATH=/bin")
			}
			if tt.flag {
				args = append(args, flagScalar...)
				args = append(args, flagList...)
			}
			c, err := loadConfig(args, environ, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.opts.maxConn != tt.wantN {
				t.Errorf("max-conn-tasks = %d, want %d", c.opts.maxConn, tt.wantN)
			}
			var got []string
			for _, s := range c.opts.upstreams {
				got = append(got, s.Name+"="+s.URL)
			}
			if !slices.Equal(got, tt.wantList) && !(len(got) == 0 && len(tt.wantList) == 0) {
				t.Errorf("upstreams = %q, want %q", got, tt.wantList)
			}
			if list := c.fs.Lookup("upstream").Value.(flag.Getter).Get().([]string); !slices.Equal(list, tt.wantList) && len(list)+len(tt.wantList) > 0 {
				t.Errorf("--upstream's values = %q, want %q", list, tt.wantList)
			}
			for _, name := range []string{"max-conn-tasks", "upstream"} {
				from := c.from[name]
				if tt.wantFrom == "" && from != "" || !strings.HasPrefix(from, tt.wantFrom) {
					t.Errorf("%s came from %q, want %q...", name, from, tt.wantFrom)
				}
			}
		})
	}
}

// TestConfigTopics: the topics flags (CONTRACT.md section 13) come from the
// environment and the --config file like every flag.
func TestConfigTopics(t *testing.T) {
	file := writeFile(t, "edge.toml", "jetstream = true\njetstream-max-age = \"1h\"\njetstream-max-bytes = 1048576\n")
	c, err := loadConfig([]string{"--config", file}, []string{"EDGE_NATS=nats://127.0.0.1:4222", "EDGE_NATS_PREFIX=eu.prod"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.opts.topics
	if tc.URL != "nats://127.0.0.1:4222" || tc.Prefix != "eu.prod" || !tc.JetStream || tc.MaxAge != time.Hour || tc.MaxBytes != 1<<20 {
		t.Errorf("topics config %+v", tc)
	}
}

// TestConfigEnvList: a list in the environment is a TOML array of strings,
// or one plain string for a list of one; durations and booleans read as on
// the command line.
func TestConfigEnvList(t *testing.T) {
	c, err := loadConfig(nil, []string{
		"EDGE_UPSTREAM=a=exec:edge --stdio",
		`EDGE_ROUTE=["edge/*=memory", "run/*=a"]`,
		"EDGE_UPSTREAM_TIMEOUT=1m30s",
		"EDGE_ADMIN_PPROF=true",
		"EDGE_ADMIN_LISTEN=127.0.0.1:0",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := c.opts
	if len(o.upstreams) != 1 || o.upstreams[0].URL != "exec:edge --stdio" {
		t.Errorf("upstreams = %+v, want one exec upstream", o.upstreams)
	}
	if len(o.routes) != 2 || o.routes[1].Target != "a" {
		t.Errorf("routes = %+v, want two", o.routes)
	}
	if o.upstream.Timeout.String() != "1m30s" || !o.adminPprof || o.adminListen != "127.0.0.1:0" {
		t.Errorf("upstream-timeout %s, admin-pprof %v, admin-listen %q", o.upstream.Timeout, o.adminPprof, o.adminListen)
	}
}

// TestConfigRefused: an unknown key in the --config file, an EDGE_ variable
// that names no flag, a value of the wrong type or that the flag refuses,
// and a bad combination are each refused with an error naming the key or
// variable and where it came from; every problem is reported at once.
func TestConfigRefused(t *testing.T) {
	tests := []struct {
		name    string
		file    string // the --config file's text, none when empty
		environ []string
		args    []string
		want    []string // substrings of the error; FILE is the file's path
	}{
		{name: "unknown key", file: "max-conn-taks = 5\n", want: []string{`config FILE: unknown key "max-conn-taks"`}},
		{name: "unknown table", file: "[admin]\nlisten = \"x\"\n", want: []string{`config FILE: unknown key "admin"`}},
		{name: "removed flag in file", file: "pprof-listen = \"127.0.0.1:6060\"\n", want: []string{`config FILE: key "pprof-listen": --pprof-listen was removed: use --admin-listen`}},
		{name: "config names another", file: "config = \"other.toml\"\n", want: []string{`config FILE: key "config": a config file cannot name another`}},
		{name: "unknown variable", environ: []string{"EDGE_MAX_CONN_TASK=5"}, want: []string{"unknown environment variable EDGE_MAX_CONN_TASK"}},
		{name: "variable in lower case", environ: []string{"EDGE_max_tasks=5"}, want: []string{"unknown environment variable EDGE_max_tasks: the variable of --max-tasks is EDGE_MAX_TASKS"}},
		{name: "removed flag in env", environ: []string{"EDGE_PPROF_LISTEN=x"}, want: []string{"environment variable EDGE_PPROF_LISTEN: --pprof-listen was removed"}},
		{name: "string for an integer", file: "max-conn-tasks = \"512\"\n", want: []string{`config FILE: key "max-conn-tasks": want an integer, got "512"`}},
		{name: "integer for a duration", file: "upstream-timeout = 30\n", want: []string{`config FILE: key "upstream-timeout": want a duration string such as "30s", got 30`}},
		{name: "bad duration", file: "ping-interval = \"soon\"\n", want: []string{`config FILE: key "ping-interval" = "soon": want a duration`}},
		{name: "string for a list", file: "upstream = \"a=tcp://127.0.0.1:1\"\n", want: []string{`config FILE: key "upstream": want an array of strings`}},
		{name: "bad upstream in file", file: "upstream = [\"nourl\"]\n", want: []string{`config FILE: key "upstream" = ["nourl"]: upstream "nourl": want NAME=URL`}},
		{name: "bad integer in env", environ: []string{"EDGE_MAX_TASKS=lots"}, want: []string{`environment variable EDGE_MAX_TASKS="lots": bad value for --max-tasks: want an integer`}},
		{name: "bad list in env", environ: []string{`EDGE_ROUTE=["a=b"`}, want: []string{"environment variable EDGE_ROUTE: want a TOML array of strings"}},
		{name: "bad bool in env", environ: []string{"EDGE_STDIO=yes"}, want: []string{`environment variable EDGE_STDIO="yes": bad value for --stdio`}},
		{name: "check names the file", file: "max-tasks = -1\n", want: []string{"max-tasks -1 must be positive (from config FILE)"}},
		{name: "check names the variable", environ: []string{"EDGE_OUTBOUND_HARD_BYTES=-5"}, want: []string{"outbound-hard-bytes -5 must not be negative (from environment variable EDGE_OUTBOUND_HARD_BYTES)"}},
		{name: "route without upstream", file: "route = [\"x=memory\"]\n", want: []string{"--route needs an --upstream (from config FILE)"}},
		{name: "pprof without admin", environ: []string{"EDGE_ADMIN_PPROF=true"}, want: []string{"--admin-pprof needs --admin-listen (from environment variable EDGE_ADMIN_PPROF)"}},
		{name: "admin on the data port", args: []string{"--listen", "127.0.0.1:8080", "--admin-listen", "127.0.0.1:8080"}, want: []string{"--admin-listen 127.0.0.1:8080 is also the --listen address"}},
		{name: "jetstream without nats", environ: []string{"EDGE_JETSTREAM=true"}, want: []string{"--jetstream needs --nats (from environment variable EDGE_JETSTREAM)"}},
		{name: "bad nats prefix", file: "nats = \"nats://127.0.0.1:4222\"\nnats-prefix = \"a.*\"\n", want: []string{`nats-prefix "a.*"`, "(from config FILE)"}},
		{name: "bad jetstream limit", args: []string{"--nats", "nats://127.0.0.1:4222", "--jetstream", "--jetstream-max-bytes", "0"}, want: []string{"jetstream-max-bytes 0 must be positive"}},
		{name: "bad admin address", file: "admin-listen = \"nowhere\"\n", want: []string{`admin-listen "nowhere"`, "(from config FILE)"}},
		{
			name:    "every problem at once",
			file:    "bogus = 1\nmax-conn-tasks = true\n",
			environ: []string{"EDGE_NOPE=1"},
			want:    []string{`unknown key "bogus"`, `key "max-conn-tasks": want an integer, got true`, "unknown environment variable EDGE_NOPE"},
		},
		{name: "missing file", args: []string{"--config", "/nonexistent/edge.toml"}, want: []string{"config: open /nonexistent/edge.toml"}},
		{name: "not TOML", file: "max-conn-tasks = = 1\n", want: []string{"config FILE: toml: line 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			var path string
			if tt.file != "" {
				path = writeFile(t, "edge.toml", tt.file)
				args = append([]string{"--config", path}, args...)
			}
			_, err := loadConfig(args, tt.environ, io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "FILE", path); !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestConfigFileOverriddenStillChecked: a bad value in the file is an error
// even when the command line sets the flag: the file is wrong either way.
func TestConfigFileOverriddenStillChecked(t *testing.T) {
	path := writeFile(t, "edge.toml", "max-conn-tasks = \"many\"\n")
	_, err := loadConfig([]string{"--config", path, "--max-conn-tasks", "5"}, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `key "max-conn-tasks"`) {
		t.Fatalf("error %v, want one naming the file's key", err)
	}
}

// stripComments returns text without its comment lines and trailing
// comments: the values `edge config` printed.
func stripComments(text string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, "  # from "); i >= 0 {
			line = line[:i]
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// TestEdgeConfigRoundTrip: `edge config` prints every flag (but --config)
// with its effective value, from the command line, the environment and a
// file together, each with where it came from; fed back as the only source
// (--config OUT), that output gives the same effective configuration.
func TestEdgeConfigRoundTrip(t *testing.T) {
	file := writeFile(t, "edge.toml", `
max-conn-tasks = 512
handshake-timeout = "3s"
upstream = ["engine=tcp://127.0.0.1:9000", "worker=exec:edge --stdio --log-level \"warn\""]
route = ["edge/sleep=worker", "edge/*=memory"]
`)
	args := []string{"--config", file, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--admin-pprof"}
	environ := []string{"EDGE_CANCEL_REPLY=error", "EDGE_UPSTREAM_TIMEOUT=1m30s"}
	var first bytes.Buffer
	if err := runConfig(args, environ, &first, io.Discard); err != nil {
		t.Fatal(err)
	}
	out := first.String()
	for _, want := range []string{
		"max-conn-tasks = 512  # from " + file,
		`handshake-timeout = "3s"  # from ` + file,
		`listen = "127.0.0.1:0"  # from --listen`,
		`cancel-reply = "error"  # from EDGE_CANCEL_REPLY`,
		`upstream-timeout = "1m30s"  # from EDGE_UPSTREAM_TIMEOUT`,
		`upstream = ["engine=tcp://127.0.0.1:9000", "worker=exec:edge --stdio --log-level \"warn\""]`,
		"max-tasks = 65536\n",
		"admin-pprof = true  # from --admin-pprof",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("edge config output lacks %q:\n%s", want, out)
		}
	}
	// Every flag but --config is a key, and nothing else is.
	var doc map[string]any
	if _, err := toml.Decode(out, &doc); err != nil {
		t.Fatalf("output is not TOML: %v\n%s", err, out)
	}
	c, err := loadConfig(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.fs.VisitAll(func(f *flag.Flag) {
		if _, ok := doc[f.Name]; !ok && f.Name != "config" {
			t.Errorf("flag --%s missing from the output", f.Name)
		}
	})
	if _, ok := doc["config"]; ok || len(doc) != countFlags(c.fs)-1 {
		t.Errorf("output has %d keys (config among them: %v), want the %d flags but --config", len(doc), ok, countFlags(c.fs)-1)
	}

	again := writeFile(t, "again.toml", out)
	var second bytes.Buffer
	if err := runConfig([]string{"--config", again}, nil, &second, io.Discard); err != nil {
		t.Fatalf("edge config --config <its own output>: %v", err)
	}
	if a, b := stripComments(out), stripComments(second.String()); a != b {
		t.Errorf("round trip changed the configuration:\nfirst:\n%s\nsecond:\n%s", a, b)
	}
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// TestEdgeConfigRedactsSecrets: `edge config` prints a secret flag's value
// as "<redacted>" (an unset one as ""), from any source. No flag is secret
// yet, so the test marks --registry and --ndjson-listen as the access-control
// flags will be marked in defineFlags.
func TestEdgeConfigRedactsSecrets(t *testing.T) {
	c, err := loadConfig(nil, []string{"EDGE_REGISTRY=/etc/edge/s3cr3t.json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.secret["registry"] = true
	c.secret["ndjson-listen"] = true
	var out bytes.Buffer
	if err := c.writeTOML(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cr3t") {
		t.Errorf("the secret leaked:\n%s", out.String())
	}
	for _, want := range []string{`registry = "<redacted>"  # from EDGE_REGISTRY`, `ndjson-listen = ""` + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDefineFlagsSecrets: every flag marked secret exists and is a string
// (a list or a number cannot be redacted as one string).
func TestDefineFlagsSecrets(t *testing.T) {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	for name := range defineFlags(fs, &options{}) {
		if f := fs.Lookup(name); f == nil || kindOf(f) != kindString {
			t.Errorf("secret flag --%s: not a string flag", name)
		}
	}
}

// TestEdgeConfigInvalid: `edge config` refuses what edge would refuse at
// start-up, before printing anything: a bad value, and a route naming no
// upstream (checked when the upstream set is built).
func TestEdgeConfigInvalid(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bad value", []string{"--max-batch", "0"}, "max-batch 0 must be positive"},
		{"route to nowhere", []string{"--upstream", "a=tcp://127.0.0.1:1", "--route", "x=b"}, `no upstream named "b"`},
		{"missing registry", []string{"--registry", "/nonexistent.json"}, "registry"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runConfig(tt.args, nil, &out, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
			if out.Len() > 0 {
				t.Errorf("printed %q for an invalid configuration", out.String())
			}
		})
	}
}

// TestEdgeConfigReadsEnvironment: run's `config` reads the process's
// environment, as edge itself does.
func TestEdgeConfigReadsEnvironment(t *testing.T) {
	t.Setenv("EDGE_MAX_CONN_TASKS", "7")
	stdout, _, err := cliRun(t, "config")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "max-conn-tasks = 7  # from EDGE_MAX_CONN_TASKS\n") {
		t.Errorf("edge config:\n%s", stdout)
	}
}

// TestConfigExitStatus runs the edge binary: an unknown key in the --config
// file, an unknown EDGE_ variable, a bad value and an invalid configuration
// for `edge config` each exit with status 2 and a message on stderr naming
// the key or variable (and the file); a valid `edge config` exits 0. The
// binary does not pass its EDGE_* variables on to its exec upstreams: a
// child `edge --stdio` started with EDGE_UPSTREAM set would start its own
// child, and so on.
func TestConfigExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	file := writeFile(t, "edge.toml", "max-conn-tasks = 512\nmax-con-tasks = 1\n")
	for _, tt := range []struct {
		name       string
		args       []string
		env        []string
		wantStatus int
		want       []string
	}{
		{"unknown key in file", []string{"--config", file}, nil, 2, []string{"config " + file + `: unknown key "max-con-tasks"`}},
		{"unknown variable", []string{"--listen", "127.0.0.1:0"}, []string{"EDGE_LISTEN_ADDR=127.0.0.1:0"}, 2, []string{"unknown environment variable EDGE_LISTEN_ADDR"}},
		{"bad value", nil, []string{"EDGE_PING_INTERVAL=often"}, 2, []string{"EDGE_PING_INTERVAL", "want a duration"}},
		{"edge config, invalid", []string{"config", "--config", file}, nil, 2, []string{`unknown key "max-con-tasks"`}},
		{"admin on every interface", []string{"config", "--admin-listen", "0.0.0.0:0"}, nil, 2, []string{"--admin-token FILE", "--admin-insecure"}},
		{"edge config, valid", []string{"config"}, []string{"EDGE_MAX_TASKS=9"}, 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append(cleanEnv(), tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			status := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				status = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tt.wantStatus {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if tt.wantStatus != 0 && stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			if tt.wantStatus == 0 && !strings.Contains(stdout.String(), "max-tasks = 9  # from EDGE_MAX_TASKS") {
				t.Errorf("stdout:\n%s", stdout.String())
			}
		})
	}
}

// cleanEnv is the test's environment without EDGE_* variables.
func cleanEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envPrefix) })
}

// TestExecUpstreamGetsNoEdgeEnv: edge does not pass its EDGE_* variables on
// to exec upstreams. Were EDGE_UPSTREAM inherited, a child `edge --stdio`
// would start its own child, and that one its own. The child here writes its
// environment to a file.
func TestExecUpstreamGetsNoEdgeEnv(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	t.Setenv("EDGE_UPSTREAM", `child=exec:/bin/sh -c "env > `+out+`.tmp && mv `+out+`.tmp `+out+` && exec cat"`)
	t.Setenv("EDGE_MAX_TASKS", "100")
	startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1")
	var env string
	poll.Until(t, edgeWait, "the child's environment", func() (bool, string) {
		data, err := os.ReadFile(out)
		env = string(data)
		return err == nil, fmt.Sprint(err)
	})
	if !strings.Contains(env, "PATH=") {
		t.Fatalf("child environment without PATH:\n%s", env)
	}
	for _, line := range strings.Split(env, "\n") {
		if strings.HasPrefix(line, envPrefix) {
			t.Errorf("the exec child inherited %s", line)
		}
	}
}
