package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"time"
)

// runVersion is `edge version`: the module's version, the commit it was
// built from and the Go toolchain, from the binary's build information.
func runVersion(stdout io.Writer) error {
	_, err := fmt.Fprintln(stdout, versionLine())
	return err
}

// versionLine is "edge VERSION (commit REV[, modified], TIME) GOVERSION".
// A `go build` in a checkout stamps the commit (unless -buildvcs=false); a
// `go install module@version` stamps the version; either may be missing.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "edge (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	} else if len(rev) > 12 {
		rev = rev[:12]
	}
	commit := "commit " + rev + modified
	if at != "" {
		commit += ", " + at
	}
	return fmt.Sprintf("edge %s (%s) %s", version, commit, bi.GoVersion)
}

// runHealth is `edge health [ADDR]`: GET http://ADDR/healthz on the admin
// listener [127.0.0.1:9090], for a container's health check where no curl
// is installed. Exit status 0 on 200, 1 otherwise.
func runHealth(ctx context.Context, args []string, stdout io.Writer) error {
	addr := "127.0.0.1:9090"
	switch len(args) {
	case 0:
	case 1:
		addr = args[0]
	default:
		return fmt.Errorf("usage: edge health [ADMIN-ADDR]")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s: %s %s", addr, resp.Status, bytes.TrimSpace(body))
	}
	_, err = fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(body))
	return err
}
