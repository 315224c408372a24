package slurm

import (
	"testing"
	"time"
)

func TestParseState(t *testing.T) {
	cases := []struct {
		raw, reason string
		name        string
		class       Class
		failure     Failure
		by          int
	}{
		{"PENDING", "Dependency", "PENDING", Pending, "", -1},
		{"PENDING", "DependencyNeverSatisfied", "PENDING", Pending, "", -1},
		{"RUNNING", "None", "RUNNING", Running, "", -1},
		{"COMPLETING", "", "COMPLETING", Running, "", -1},
		{"CONFIGURING", "", "CONFIGURING", Running, "", -1},
		{"SUSPENDED", "", "SUSPENDED", Running, "", -1},
		{"REQUEUED", "", "REQUEUED", Pending, "", -1},
		{"REQUEUE_HOLD", "", "REQUEUE_HOLD", Pending, "", -1},
		{"COMPLETED", "None", "COMPLETED", Succeeded, "", -1},
		{"FAILED", "NonZeroExitCode", "FAILED", Failed, FailureExitCode, -1},
		{"FAILED", "JobLaunchFailure", "FAILED", Failed, FailureExitCode, -1},
		{"FAILED", "BadConstraints", "FAILED", Failed, FailureLaunch, -1},
		{"FAILED", "RaisedSignal:9(Killed)", "FAILED", Failed, FailureExitCode, -1},
		{"CANCELLED by 0", "None", "CANCELLED", Failed, FailureCancelled, 0},
		{"CANCELLED by 1000", "", "CANCELLED", Failed, FailureCancelled, 1000},
		{"CANCELLED", "DependencyNeverSatisfied", "CANCELLED", Failed, FailureDependency, -1},
		{"CANCELLED by 0", "(DependencyNeverSatisfied)", "CANCELLED", Failed, FailureCancelled, 0},
		{"CANCELLED", "Dependency", "CANCELLED", Failed, FailureDependency, -1},
		{"CANCELLED by 0", "Dependency", "CANCELLED", Failed, FailureCancelled, 0},
		{"CANCELLED", "None", "CANCELLED", Failed, FailureCancelled, -1},
		{"CANCELLED+", "", "CANCELLED", Failed, FailureCancelled, -1},
		{"TIMEOUT", "TimeLimit", "TIMEOUT", Failed, FailureTimeout, -1},
		{"OUT_OF_MEMORY", "OutOfMemory", "OUT_OF_MEMORY", Failed, FailureOutOfMemory, -1},
		{"NODE_FAIL", "", "NODE_FAIL", Failed, FailureNodeFailure, -1},
		{"PREEMPTED", "", "PREEMPTED", Failed, FailurePreempted, -1},
		{"BOOT_FAIL", "", "BOOT_FAIL", Failed, FailureBootFailure, -1},
		{"DEADLINE", "", "DEADLINE", Failed, FailureDeadline, -1},
		{"REVOKED", "", "REVOKED", Failed, FailureRevoked, -1},
		{"PD", "", "PENDING", Pending, "", -1},
		{"CD", "", "COMPLETED", Succeeded, "", -1},
		{"OOM", "", "OUT_OF_MEMORY", Failed, FailureOutOfMemory, -1},
		{"running", "", "RUNNING", Running, "", -1},
		{"", "", "", Unknown, "", -1},
		{"WEIRD_NEW_STATE", "", "WEIRD_NEW_STATE", Unknown, "", -1},
		{"CANCELLED by x", "", "CANCELLED", Failed, FailureCancelled, -1},
	}
	for _, c := range cases {
		s := ParseState(c.raw, c.reason)
		if s.Raw != c.raw || s.Name != c.name || s.Class != c.class || s.Failure != c.failure || s.ByUID != c.by {
			t.Errorf("ParseState(%q, %q) = %+v, want name %s class %v failure %q by %d", c.raw, c.reason, s, c.name, c.class, c.failure, c.by)
		}
		if s.Terminal() != (c.class == Succeeded || c.class == Failed) {
			t.Errorf("ParseState(%q).Terminal() = %v", c.raw, s.Terminal())
		}
	}
}

func TestClassText(t *testing.T) {
	for c := Unknown; c <= Failed; c++ {
		b, _ := c.MarshalText()
		var back Class
		if err := back.UnmarshalText(b); err != nil || back != c {
			t.Errorf("round trip %v: %v %v", c, back, err)
		}
	}
	if Class(42).String() != "class(42)" {
		t.Error(Class(42).String())
	}
}

func TestParseExitCode(t *testing.T) {
	cases := []struct {
		in        string
		known     bool
		code, sig int
		zero      bool
	}{
		{"0:0", true, 0, 0, true},
		{"3:0", true, 3, 0, false},
		{"0:15", true, 0, 15, false},
		{"0:9", true, 0, 9, false},
		{"137:0", true, 137, 0, false},
		{"255:0", true, 255, 0, false},
		{"", false, 0, 0, false},
		{"N/A", false, 0, 0, false},
		{"1", false, 0, 0, false},
		{"-1:0", false, 0, 0, false},
		{"999:0", false, 0, 0, false},
		{"a:b", false, 0, 0, false},
	}
	for _, c := range cases {
		e := ParseExitCode(c.in)
		if e.Known != c.known || e.Code != c.code || e.Signal != c.sig || e.Zero() != c.zero || e.Raw != c.in || e.String() != c.in {
			t.Errorf("ParseExitCode(%q) = %+v", c.in, e)
		}
	}
}

func TestParseElapsed(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"00:00:00", 0, true},
		{"00:00:07", 7 * time.Second, true},
		{"02:03", 2*time.Minute + 3*time.Second, true},
		{"0:00", 0, true},
		{"1:02:03", time.Hour + 2*time.Minute + 3*time.Second, true},
		{"1-02:03:04", 26*time.Hour + 3*time.Minute + 4*time.Second, true},
		{"12-00:00:00", 12 * 24 * time.Hour, true},
		{"00:01.500", time.Second + 500*time.Millisecond, true},
		{"42", 42 * time.Second, true},
		{"INVALID", 0, false},
		{"UNLIMITED", 0, false},
		{"", 0, false},
		{"1:2:3:4", 0, false},
		{"-1:00", 0, false},
		{"1-", 0, false},
		{"00:01.", 0, false},
		{"::", 0, false},
	}
	for _, c := range cases {
		got, ok := ParseElapsed(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseElapsed(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestParseTime(t *testing.T) {
	utc := time.UTC
	cases := []struct {
		in   string
		want time.Time
	}{
		{"1700000000", time.Unix(1700000000, 0)},
		{"2024-01-02T03:04:05", time.Date(2024, 1, 2, 3, 4, 5, 0, utc)},
		{"Unknown", time.Time{}},
		{"None", time.Time{}},
		{"N/A", time.Time{}},
		{"", time.Time{}},
		{"0", time.Time{}},
		{"99999999999999999999", time.Time{}},
		{"2024-13-02T03:04:05", time.Time{}},
	}
	for _, c := range cases {
		if got := ParseTime(c.in, utc); !got.Equal(c.want) {
			t.Errorf("ParseTime(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}
