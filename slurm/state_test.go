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
		// A federated job's copy on a cluster that did not run it: not the
		// job's end, whatever the running copy does.
		{"REVOKED", "", "REVOKED", Unknown, "", -1},
		{"RV", "", "REVOKED", Unknown, "", -1},
		// 25.11's expedited requeue: on its way back to the queue.
		{"EXPEDITING", "", "EXPEDITING", Pending, "", -1},
		{"EXPEDITING", "None", "EXPEDITING", Pending, "", -1},
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

func TestParseTimeLimit(t *testing.T) {
	const (
		m = time.Minute
		h = time.Hour
		d = 24 * time.Hour
	)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		// squeue %l (lab, 22.05.8) and sacct Timelimit
		{"1:00", m, true},
		{"5:00", 5 * m, true},
		{"30:00", 30 * m, true},
		{"1:00:00", h, true},
		{"1:30:00", 90 * m, true},
		{"1-00:00:00", d, true},
		{"1-02:03:00", d + 2*h + 3*m, true},
		{"00:05:00", 5 * m, true},
		{"365-00:00:00", 365 * d, true},
		{"0:45", 45 * time.Second, true},
		// sacct TimelimitRaw: whole minutes
		{"1", m, true},
		{"5", 5 * m, true},
		{"60", h, true},
		{"1563", d + 2*h + 3*m, true},
		{"0", 0, true},
		{" 60 ", h, true},
		// the other forms --time takes
		{"2-12", 2*d + 12*h, true},
		{"2-12:30", 2*d + 12*h + 30*m, true},
		// no limit, or none known
		{"UNLIMITED", Unlimited, true},
		{"unlimited", Unlimited, true},
		{"INFINITE", Unlimited, true},
		{"Partition_Limit", 0, true},
		{"NOT_SET", 0, true},
		{"INVALID", 0, true},
		{"N/A", 0, true},
		{"", 0, true},
		// malformed
		{"-1", 0, false},
		{"-5:00", 0, false},
		{"1-", 0, false},
		{"1--2", 0, false},
		{"1:2:3:4", 0, false},
		{"1-1:2:3:4", 0, false},
		{":30", 0, false},
		{"30:", 0, false},
		{"1.5", 0, false},
		{"+5", 0, false},
		{"5m", 0, false},
		{"1 00:00:00", 0, false},
		{"Partition", 0, false},
		{"99999999999", 0, false},    // 11 digits
		{"60000000", 0, false},       // minutes: over 100 years
		{"36500-00:00:01", 0, false}, // over 100 years
		{"36500-00:00:00", 36500 * d, true},
	}
	for _, c := range cases {
		got, err := ParseTimeLimit(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("ParseTimeLimit(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestHeldBy(t *testing.T) {
	cases := []struct {
		state, reason, want string
	}{
		{"PENDING", "JobHeldUser", "user"},
		{"PENDING", "JobHeldAdmin", "admin"},
		{"PENDING", "(JobHeldUser)", "user"},
		{"REQUEUE_HOLD", "JobHeldAdmin", "admin"},
		{"PENDING", "None", ""},
		{"PENDING", "", ""},
		{"PENDING", "BeginTime", ""},
		{"PENDING", "Dependency", ""},
		{"PENDING", "jobhelduser", ""},
		// sacct keeps the reason of a job held, released and run
		{"COMPLETED", "JobHeldUser", ""},
		{"RUNNING", "JobHeldAdmin", ""},
		{"CANCELLED by 0", "JobHeldUser", ""},
		{"", "JobHeldUser", ""},
	}
	for _, c := range cases {
		j := JobInfo{Reason: c.reason, State: ParseState(c.state, c.reason)}
		if got := j.HeldBy(); got != c.want {
			t.Errorf("HeldBy() of a %s job with reason %q = %q, want %q", c.state, c.reason, got, c.want)
		}
	}
}
