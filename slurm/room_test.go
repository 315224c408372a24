package slurm

import (
	"context"
	"strings"
	"testing"
)

func TestParseRoom(t *testing.T) {
	for _, c := range []struct {
		name, out, gres string
		want            Room
		err             string
	}{
		{name: "lab node, one of two held", out: "mixed|gpu:h100:2|gpu:h100:1(IDX:0)|\n--\n3\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 2, FreeGPUs: 1, Pending: 3}},
		{name: "idle, nothing used", out: "idle|gpu:h100:2|gpu:h100:0(IDX:N/A)|\n--\n0\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 2, FreeGPUs: 2}},
		{name: "down and drained nodes take no jobs", out: "idle|gpu:h100:4|gpu:h100:0|\ndown*|gpu:h100:4|gpu:h100:0|\ndrained|gpu:h100:4|gpu:h100:0|\nmixed+drain|gpu:h100:4|gpu:h100:0|\n--\n7\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 4, FreeGPUs: 4, Pending: 7}},
		{name: "other types not counted", out: "mixed|gpu:a100:8(S:0-1),gpu:h100:2(S:0,1)|gpu:a100:8(IDX:0-7),gpu:h100:1(IDX:0)|\n--\n12\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 2, FreeGPUs: 1, Pending: 12}},
		{name: "untyped request counts every type", out: "mixed|gpu:a100:8,gpu:h100:2|gpu:a100:2,gpu:h100:1|\n--\n0\n", gres: "gpu:1", want: Room{Nodes: 1, GPUs: 10, FreeGPUs: 7}},
		{name: "no gres", out: "idle|(null)|(null)|\n--\n0\n", gres: "gpu:h100:1", want: Room{Nodes: 1}},
		{name: "empty partition", out: "--\n0\n", gres: "gpu:h100:1", want: Room{}},
		{name: "allocated", out: "allocated|gpu:h100:8|gpu:h100:8(IDX:0-7)|\n--\n40\n", gres: "gpu:h100:1", want: Room{Nodes: 1, GPUs: 8, Pending: 40}},
		{name: "no separator", out: "idle|gpu:h100:2|gpu:h100:0|\n", gres: "gpu:h100:1", err: `no "--" line`},
		{name: "count not a number", out: "--\nsqueue: error\n", gres: "gpu:h100:1", err: "pending count"},
		{name: "short line", out: "idle|gpu:h100:2\n--\n0\n", gres: "gpu:h100:1", err: "want state|gres|gres used"},
		{name: "bad count", out: "idle|gpu:h100:x|gpu:h100:0|\n--\n0\n", gres: "gpu:h100:1", err: "want a whole number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name, typ, _ := splitGres(c.gres)
			got, err := ParseRoom(c.out, name, typ)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestRoomCommand(t *testing.T) {
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){}}
	f.handlers["sh"] = func(argv []string) (string, string, int) {
		if len(argv) != 5 || argv[4] != "gpu" || !strings.Contains(argv[2], "sinfo") || !strings.Contains(argv[2], "--states=PENDING") {
			return "", "bad argv", 2
		}
		return "mixed|gpu:h100:2|gpu:h100:1(IDX:0)|\n--\n5\n", "", 0
	}
	r, err := New(f).Room(context.Background(), "gpu", "gpu:h100:1")
	if err != nil || r != (Room{Nodes: 1, GPUs: 2, FreeGPUs: 1, Pending: 5}) {
		t.Fatalf("%+v %v", r, err)
	}
	f.handlers["sh"] = func([]string) (string, string, int) {
		return "", "sinfo: error: Unable to contact slurm controller (connect failure)", 1
	}
	if _, err := New(f).Room(context.Background(), "gpu", "gpu:h100:1"); err == nil || !strings.Contains(err.Error(), "Unable to contact") || !strings.Contains(err.Error(), `"gpu"`) {
		t.Fatalf("err %v", err)
	}
}

func FuzzParseRoom(f *testing.F) {
	f.Add("mixed|gpu:h100:2|gpu:h100:1(IDX:0)|\n--\n3\n", "gpu", "h100")
	f.Add("idle|gpu:a100:8(S:0-1),gpu:h100:2(S:0,1)|(null)|\n--\n0\n", "gpu", "")
	f.Fuzz(func(t *testing.T, out, name, typ string) {
		r, err := ParseRoom(out, name, typ)
		if err == nil && (r.FreeGPUs > r.GPUs || r.FreeGPUs < 0 || r.Pending < 0 || r.Nodes < 0) {
			t.Fatalf("%+v from %q", r, out)
		}
	})
}
