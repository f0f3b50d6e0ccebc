package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagGroup is one concern of `edge --help`.
type flagGroup struct {
	title string
	// match reports whether a flag belongs here; the first group that
	// matches takes it.
	match func(name string) bool
}

func named(names ...string) func(string) bool {
	return func(n string) bool {
		for _, x := range names {
			if n == x || (strings.HasSuffix(x, "*") && strings.HasPrefix(n, x[:len(x)-1])) {
				return true
			}
		}
		return false
	}
}

// flagGroups order `edge --help`: what a first user sets first.
var flagGroups = []flagGroup{
	{"Listening", named("listen", "ws-path", "ndjson-*", "stdio", "loops", "config")},
	{"TLS and client addresses", named("tls-*", "handshake-*", "proxy-protocol*", "trusted-proxy")},
	{"Access control", named("auth-*", "jwt-*", "allow-origin", "rate-*", "max-conns-per-ip")},
	{"Upstreams (edge in front of your services)", named("upstream*", "route", "profile", "max-batch", "registry", "subscribe-methods")},
	{"Cluster over NATS", named("nats*", "jetstream*")},
	{"Operations: admin listener and logs", named("admin-*", "log-*")},
	{"Limits and backpressure", named("max-*", "outbound-*", "write-stall-timeout", "subscription-buffer*", "read-buffer-bytes", "spare-output-bytes", "cancel-reply", "worker-idle")},
	{"Liveness and shutdown", named("ping-interval", "pong-timeout", "close-timeout", "shutdown-timeout")},
}

// groupOf is the title of name's group, or "Other".
func groupOf(name string) string {
	for _, g := range flagGroups {
		if g.match(name) {
			return g.title
		}
	}
	return "Other"
}

// printHelp writes `edge --help`: the usage, then the flags by group.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usage)
	byGroup := make(map[string][]*flag.Flag)
	fs.VisitAll(func(f *flag.Flag) { byGroup[groupOf(f.Name)] = append(byGroup[groupOf(f.Name)], f) })
	titles := make([]string, 0, len(flagGroups)+1)
	for _, g := range flagGroups {
		titles = append(titles, g.title)
	}
	for _, title := range append(titles, "Other") {
		flags := byGroup[title]
		if len(flags) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		one := flag.NewFlagSet("", flag.ContinueOnError)
		one.SetOutput(w)
		for _, f := range flags {
			one.Var(f.Value, f.Name, f.Usage)
		}
		one.PrintDefaults()
	}
}

// wantsHelp reports whether args ask for help (-h, -help, --help) among the
// flags, before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// unknownFlags lists every flag of args that fs does not define, each with
// the nearest defined flag as a suggestion: all in one round, instead of the
// flag package's first error followed by every flag's usage.
func unknownFlags(fs *flag.FlagSet, args []string) error {
	var errs []error
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break // the flag package stops here too
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			msg := fmt.Sprintf("unknown flag --%s", name)
			if hint, ok := removedFlags[name]; ok {
				msg = fmt.Sprintf("--%s was removed: %s", name, hint)
			} else if near := nearestFlag(fs, name); near != "" {
				msg += fmt.Sprintf(": did you mean --%s?", near)
			}
			errs = append(errs, errors.New(msg))
			if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++ // most likely its value: go on with the flags after it
			}
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // the flag's value
		}
	}
	if len(errs) == 0 {
		return nil
	}
	errs = append(errs, errors.New("(edge --help lists every flag)"))
	return errors.Join(errs...)
}

// nearestFlag is the defined flag closest to name in edit distance, when it
// is close enough to be a typo (at most 2 edits, or a third of the name), or
// the one flag name starts; "" otherwise.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", max(2, len(name)/3)+1
	var prefixed []string
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
		if strings.HasPrefix(f.Name, name) {
			prefixed = append(prefixed, f.Name)
		}
	})
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
