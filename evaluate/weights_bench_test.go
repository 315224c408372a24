package evaluate

import (
	"bufio"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCheckWeightsFull checks a full-size bf16 checkpoint of the
// pinned architecture (~2.9 GiB), written once to os.TempDir() and reused
// (delete it by hand: the path is logged). Beside ns/op and MB/s of
// CheckWeights it reports, from the same run over the same file:
//
//	cat_MB/s      `cat FILE > /dev/null`
//	read_MB/s     a plain 1 MiB read loop in Go
//	sha256_MB/s   read + sha256 only
//	peak_RSS_MiB  VmHWM of this process during CheckWeights (reset first)
//	base_RSS_MiB  VmRSS just before CheckWeights (the test binary itself)
//
// All passes run on a warm page cache when RAM allows (the file was just
// written or read), so they compare CPU cost, not disk speed.
//
//	go test ./evaluate/ -run '^$' -bench CheckWeightsFull -benchtime=1x
func BenchmarkCheckWeightsFull(b *testing.B) {
	arch := Qwen25_1_5B_Instruct()
	tensors := archTensors(arch, "BF16", false)
	path := filepath.Join(os.TempDir(), "nemorl-slurm-bench-qwen2.5-1.5b-instruct-bf16.safetensors")
	want := int64(8 + len(stHeader(tensors, nil)))
	for _, t := range tensors {
		want += t.bytes()
	}
	if st, err := os.Stat(path); err != nil || st.Size() != want {
		b.Logf("writing %s (%d bytes)", path, want)
		tmp := path + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			b.Fatal(err)
		}
		if err := writeSTTo(f, tensors, nil); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			b.Fatal(err)
		}
	} else {
		b.Logf("reusing %s", path)
	}
	mbps := func(d time.Duration) float64 { return float64(want) / 1e6 / d.Seconds() }

	// Warm the cache and measure cat.
	cat := func() time.Duration {
		start := time.Now()
		cmd := exec.Command("cat", path)
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer devnull.Close()
		cmd.Stdout = devnull
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	cat()
	catTime := cat()

	readTime := timePass(b, path, nil)
	hashTime := timePass(b, path, func(p []byte) { shaSink.Write(p) })

	resetPeakRSS()
	base := procStatusKiB("VmRSS:")
	b.SetBytes(want)
	b.ResetTimer()
	var rep Report
	for range b.N {
		var err error
		rep, err = CheckWeights(path, arch)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	peak := procStatusKiB("VmHWM:")
	if rep.Parameters != arch.Parameters() || !rep.TiedHead || rep.Size != want {
		b.Fatalf("unexpected report %+v", rep)
	}
	b.ReportMetric(mbps(catTime), "cat_MB/s")
	b.ReportMetric(mbps(readTime), "read_MB/s")
	b.ReportMetric(mbps(hashTime), "sha256_MB/s")
	b.ReportMetric(float64(peak)/1024, "peak_RSS_MiB")
	b.ReportMetric(float64(base)/1024, "base_RSS_MiB")
	b.Logf("sha256 %s, %d tensors, %d parameters", rep.SHA256, rep.Tensors, rep.Parameters)
}

var shaSink = sha256.New()

// timePass reads path once through a 1 MiB buffer, calling each on every
// chunk.
func timePass(b *testing.B, path string, each func([]byte)) time.Duration {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, ReadBufferBytes)
	start := time.Now()
	for {
		n, err := f.Read(buf)
		if each != nil && n > 0 {
			each(buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// resetPeakRSS resets VmHWM (Linux: writing 5 to clear_refs).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// procStatusKiB returns a kB field of /proc/self/status, 0 if unknown.
func procStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			v, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return v
		}
	}
	return 0
}
