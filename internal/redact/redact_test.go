package redact

import (
	"strings"
	"testing"
)

// TestURLs: the userinfo of every URL in a text is masked, wherever the URL
// stands (alone, after NAME=, inside an error's quotes), and nothing else
// changes.
func TestURLs(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"no URL", "upstream a: 0 of 2 connections up", "upstream a: 0 of 2 connections up"},
		{"no userinfo", "ws://127.0.0.1:9000/rpc", "ws://127.0.0.1:9000/rpc"},
		{"password", "nats://u:hunter2@127.0.0.1:4222", "nats://u:***@127.0.0.1:4222"},
		{"token", "nats://s3cr3t@127.0.0.1:4222", "nats://***@127.0.0.1:4222"},
		{"empty password", "http://u:@h:80/", "http://u:***@h:80/"},
		{"NAME=URL", "a=ws://u:p@h:1/path?x=1", "a=ws://u:***@h:1/path?x=1"},
		{"in quotes", `upstream "a=ws://u:p@h:1/": want HOST:PORT`, `upstream "a=ws://u:***@h:1/": want HOST:PORT`},
		{"two URLs", "ws://a:b@h:1/ and http://c:d@i:2/", "ws://a:***@h:1/ and http://c:***@i:2/"},
		{"@ in the password", "ws://u:p@ss@h:1/", "ws://u:***@h:1/"},
		{"@ in the path only", "ws://h:1/a@b", "ws://h:1/a@b"},
		{"@ in the path of a URL with userinfo", "ws://u:p@h:1/a@b", "ws://u:***@h:1/a@b"},
		{"/ in the password", "nats://u:pa/ss@h:4222", "nats://u:***@h:4222"},
		{"# in the password", "ws://u:pa#ss@h:1/", "ws://u:***@h:1/"},
		{"IPv6 host", "ws://[::1]:9000/a@b", "ws://[::1]:9000/a@b"},
		{"IPv6 host with userinfo", "ws://u:p@[::1]:9000/", "ws://u:***@[::1]:9000/"},
		{"exec", "exec:edge --stdio", "exec:edge --stdio"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := URLs(tt.in); got != tt.want {
				t.Errorf("URLs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestArgs: every argument of a command line is masked on its own.
func TestArgs(t *testing.T) {
	got := strings.Join(Args([]string{"edge", "--nats=nats://u:p@h:1", "--upstream", "a=ws://t@h:2/"}), " ")
	if want := "edge --nats=nats://u:***@h:1 --upstream a=ws://***@h:2/"; got != want {
		t.Errorf("Args = %q, want %q", got, want)
	}
}

// TestURLsNoAlloc: text without a URL costs no allocation (log lines go
// through URLs).
func TestURLsNoAlloc(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = URLs("upstream connected conn=exec:edge --stdio") }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

func FuzzURLs(f *testing.F) {
	f.Add("nats://u:p@h:1")
	f.Add("ws://h:1/a@b ws://u:p/w@h")
	f.Fuzz(func(t *testing.T, s string) {
		got := URLs(s)
		if !strings.Contains(s, "://") && got != s {
			t.Fatalf("changed text without a URL: %q -> %q", s, got)
		}
		if again := URLs(got); again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, got, again)
		}
	})
}
