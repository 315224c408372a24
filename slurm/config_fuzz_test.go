package slurm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseConfig: any output, captured or not, parses without a panic;
// what it accepts agrees with itself (KillWait and MaxArraySize are the
// values of their lines, in range), and reads the same again.
func FuzzParseConfig(f *testing.F) {
	for _, c := range configCaptures {
		if b, err := readCapture(c.path); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(configText([][2]string{{"KillWait", "0 sec"}, {"MaxArraySize", "4000001"}}, "Slurmctld(primary) at a is UP\n")))
	f.Add([]byte("Configuration data as of x\nKillWait = 5 sec\nKillWait = 6 sec\nMaxArraySize = 1\n"))
	f.Add([]byte("Configuration data as of x\r\nKillWait = 5 sec\r\n\r\nMaxArraySize = 1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := ParseConfig(b)
		if err != nil {
			if cfg.Values != nil || cfg.KillWait != 0 || cfg.MaxArraySize != 0 {
				t.Fatalf("error %v with a config %+v", err, cfg)
			}
			return
		}
		if cfg.KillWait < 0 || cfg.KillWait > 65535*time.Second || cfg.KillWait%time.Second != 0 {
			t.Fatalf("KillWait %v", cfg.KillWait)
		}
		if cfg.MaxArraySize < 0 || int64(cfg.MaxArraySize) > 1<<32-1 {
			t.Fatalf("MaxArraySize %d", cfg.MaxArraySize)
		}
		// The values of their lines (leading zeros, which Slurm's %u never
		// prints, read as numbers do).
		kw, _ := strings.CutSuffix(cfg.Values["KillWait"], " sec")
		if n, err := strconv.ParseUint(kw, 10, 16); err != nil || time.Duration(n)*time.Second != cfg.KillWait {
			t.Fatalf("Values[KillWait] %q, KillWait %v", cfg.Values["KillWait"], cfg.KillWait)
		}
		if n, err := strconv.ParseUint(cfg.Values["MaxArraySize"], 10, 32); err != nil || int(n) != cfg.MaxArraySize {
			t.Fatalf("Values[MaxArraySize] %q, MaxArraySize %d", cfg.Values["MaxArraySize"], cfg.MaxArraySize)
		}
		for k := range cfg.Values {
			if k == "" || strings.ContainsAny(k, " \t\n") {
				t.Fatalf("key %q", k)
			}
		}
		again, err := ParseConfig(b)
		if err != nil || again.KillWait != cfg.KillWait || again.MaxArraySize != cfg.MaxArraySize || len(again.Values) != len(cfg.Values) {
			t.Fatalf("a second parse differs: %+v %v", again, err)
		}
	})
}

// FuzzConfigRoundTrip: whatever KillWait and MaxArraySize a slurm.conf
// holds, and whatever keys surround them, scontrol show config's output
// of them reads back as those values.
func FuzzConfigRoundTrip(f *testing.F) {
	f.Add(uint16(30), uint32(1001), "ClusterName", "c", "")
	f.Add(uint16(0), uint32(0), "SchedulerParameters", "a = b", "Cgroup Support Configuration:\nKillWait = 1 sec\n")
	f.Add(uint16(65535), uint32(4000001), "AccountingStorageExternalHost", "(null)", "Slurmctld(primary) at vm is UP\n")
	f.Fuzz(func(t *testing.T, kw uint16, mas uint32, key, value, tail string) {
		key = strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, key)
		value = strings.NewReplacer("\n", "", "\r", "").Replace(value)
		pairs := [][2]string{{"KillWait", fmt.Sprintf("%d sec", kw)}}
		if key != "" && key != "KillWait" && key != "MaxArraySize" {
			pairs = append(pairs, [2]string{key, value})
		}
		pairs = append(pairs, [2]string{"MaxArraySize", strconv.FormatUint(uint64(mas), 10)})
		cfg, err := ParseConfig([]byte(configText(pairs, tail)))
		if err != nil {
			t.Fatalf("%v\n%s", err, configText(pairs, tail))
		}
		if cfg.KillWait != time.Duration(kw)*time.Second || cfg.MaxArraySize != int(mas) {
			t.Fatalf("KillWait %v MaxArraySize %d, want %d s %d", cfg.KillWait, cfg.MaxArraySize, kw, mas)
		}
		if len(pairs) == 3 && cfg.Values[key] != strings.TrimSpace(value) {
			t.Fatalf("%s: %q, want %q", key, cfg.Values[key], value)
		}
	})
}
