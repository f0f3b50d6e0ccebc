package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestHelpGrouped: edge --help prints on stdout, exits 0 (flag.ErrHelp),
// and every flag sits in a group of its concern: a new flag that fits none
// fails here until it is placed.
func TestHelpGrouped(t *testing.T) {
	stdout, stderr, err := cliRun(t, "--help")
	if !errors.Is(err, flag.ErrHelp) || stderr != "" {
		t.Fatalf("edge --help: err %v, stderr %q; want flag.ErrHelp and nothing on stderr", err, stderr)
	}
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	defineFlags(fs, &options{})
	fs.VisitAll(func(f *flag.Flag) {
		if g := groupOf(f.Name); g == "Other" {
			t.Errorf("--%s is in no group of edge --help: add it to flagGroups", f.Name)
		}
		if !strings.Contains(stdout, "  -"+f.Name+" ") && !strings.Contains(stdout, "  -"+f.Name+"\n") {
			t.Errorf("edge --help does not list --%s", f.Name)
		}
	})
	if strings.Contains(stdout, "\nOther:\n") {
		t.Errorf("edge --help has an Other group")
	}
}

// TestUnknownFlagsSuggested: every unknown flag is reported in one round,
// each with the nearest flag, and the usage is not dumped (it was: 137
// lines after the first unknown flag only).
func TestUnknownFlagsSuggested(t *testing.T) {
	_, stderr, err := cliRun(t, "--lisen", "127.0.0.1:1", "--max-conn", "5", "--admin-listn=x", "--pprof-listen", "y", "--zzzz")
	if err == nil {
		t.Fatal("edge with unknown flags started")
	}
	for _, want := range []string{
		"unknown flag --lisen: did you mean --listen?",
		"unknown flag --max-conn: did you mean --max-conns?",
		"unknown flag --admin-listn: did you mean --admin-listen?",
		"--pprof-listen was removed",
		"unknown flag --zzzz\n",
		"edge --help lists every flag",
	} {
		if !strings.Contains(err.Error()+"\n", want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if stderr != "" {
		t.Errorf("the usage was printed: %d bytes on stderr", len(stderr))
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"listen", "lisen", 1}, {"kitten", "sitting", 3}, {"", "abc", 3}, {"abc", "abc", 0}} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
