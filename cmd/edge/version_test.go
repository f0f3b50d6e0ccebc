package main

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/openengine/edge/admin"
)

// TestVersion: `edge version` names the binary, its version and the Go
// toolchain that built it.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		stdout, stderr, err := cliRun(t, arg)
		if err != nil || stderr != "" || !strings.HasPrefix(stdout, "edge ") || !strings.HasSuffix(stdout, " "+runtime.Version()+"\n") {
			t.Fatalf("edge %s: err %v, stdout %q, stderr %q; want \"edge VERSION (commit ...) %s\"", arg, err, stdout, stderr, runtime.Version())
		}
	}
}

// TestHealth: `edge health ADDR` succeeds against a live admin listener and
// fails where none listens.
func TestHealth(t *testing.T) {
	watchdog(t)
	srv, err := admin.New(admin.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	if stdout, _, err := cliRun(t, "health", addr); err != nil || stdout != "ok\n" {
		t.Fatalf("edge health %s: err %v, stdout %q", addr, err, stdout)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cliRun(t, "health", addr); err == nil {
		t.Fatalf("edge health %s succeeded after the admin listener stopped", addr)
	}
}

// TestDeployConfigValid: the example configuration of deploy/ is one edge
// starts with.
func TestDeployConfigValid(t *testing.T) {
	var out, errOut strings.Builder
	if err := runConfig([]string{"--config", "../../deploy/edge.toml"}, nil, &out, &errOut); err != nil {
		t.Fatalf("edge config --config deploy/edge.toml: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), `admin-listen = "127.0.0.1:9090"`) {
		t.Fatalf("the effective configuration lost the file's admin-listen:\n%s", out.String())
	}
}
