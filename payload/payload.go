// Package payload holds the in-job helpers the built-in stage payloads call
// through `nemorl-slurm payload …` inside the images: settings as shell
// variables, a free local port, waiting for a local HTTP server. The stage
// logic itself is in payload/author and payload/train; the eval's trusted
// checks are in evaluate.
package payload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/shell"
)

// SettingsPrefix starts every variable Settings prints.
const SettingsPrefix = "NEMORL_SETTING_"

// Settings reads a bundle settings file (one JSON object) and returns shell
// assignments, one per line, for every scalar in it: nested keys are joined
// with "_", names upper-cased and prefixed with SettingsPrefix, values
// single-quoted, one line each. Arrays and nulls are skipped; keys that
// would not make a shell name, and strings with a newline or NUL, are an
// error.
func Settings(r io.Reader) (string, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("settings: %w", err)
	}
	if dec.More() {
		return "", errors.New("settings: more than one JSON value")
	}
	out := map[string]string{}
	if err := flatten("", v, out); err != nil {
		return "", err
	}
	names := make([]string, 0, len(out))
	for k := range out {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%s\n", k, shell.Quote(out[k]))
	}
	return b.String(), nil
}

func flatten(prefix string, v map[string]any, out map[string]string) error {
	for k, x := range v {
		name := prefix + strings.ToUpper(k)
		if !shell.IsName(SettingsPrefix + name) {
			return fmt.Errorf("settings: key %q does not make a shell variable name", k)
		}
		switch x := x.(type) {
		case map[string]any:
			if err := flatten(name+"_", x, out); err != nil {
				return err
			}
		case string:
			if strings.ContainsAny(x, "\x00\r\n") {
				return fmt.Errorf("settings: %s holds a newline or NUL", k)
			}
			out[SettingsPrefix+name] = x
		case json.Number:
			out[SettingsPrefix+name] = x.String()
		case bool:
			out[SettingsPrefix+name] = strconv.FormatBool(x)
		}
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitOptions tune WaitHTTP.
type WaitOptions struct {
	// WantStatus is the HTTP status that means ready; 0 means any
	// response at all (the server is listening).
	WantStatus int
	// PID, when positive, is the server process: WaitHTTP gives up as soon
	// as it is gone.
	PID      int
	Interval time.Duration // between tries; default 1s
}

// WaitHTTP polls url until it answers as opts want, the process dies, or
// ctx ends.
func WaitHTTP(ctx context.Context, url string, opts WaitOptions) error {
	interval := opts.Interval
	if interval <= 0 {
		interval = time.Second
	}
	client := &http.Client{Timeout: 5 * time.Second}
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if opts.WantStatus == 0 || resp.StatusCode == opts.WantStatus {
				return nil
			}
			last = "status " + strconv.Itoa(resp.StatusCode)
		} else {
			last = err.Error()
		}
		if opts.PID > 0 && !alive(opts.PID) {
			return fmt.Errorf("wait for %s: the server process %d exited (%s)", url, opts.PID, last)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for %s: %w (last: %s)", url, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || pid > math.MaxInt32 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	// state is the field after the ")" closing the command name
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
