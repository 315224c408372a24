package record

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzScan feeds arbitrary output (and tail offsets) to ScanTail for every
// stage. Properties: no panic; every error is a *Rejection; an accepted
// record validates, formats, and scans back to an equal record.
func FuzzScan(f *testing.F) {
	for _, r := range []Record{goodAuthor(), goodTrain(), goodEval()} {
		line, _ := Format(r)
		f.Add([]byte(line+"\n"), uint8(0), uint16(0))
		f.Add([]byte("log\n"+line), uint8(1), uint16(0))
		f.Add([]byte("xx\n"+line+"\n"+line+"\n"), uint8(2), uint16(3))
	}
	f.Add([]byte("NEMORL_ENV_RESULT={\"reward\":1e999}\n"), uint8(2), uint16(0))
	f.Add([]byte("NEMORL_ENV_TRAIN_RESULT={}\nNEMORL_ENV_RESULT={}"), uint8(2), uint16(0))
	f.Fuzz(func(t *testing.T, out []byte, stageByte uint8, off uint16) {
		stage := Stages[int(stageByte)%len(Stages)]
		offset := int64(off % 4) // 0 (whole file) or a tail
		rec, err := ScanTail(stage, out, offset)
		if err != nil {
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("non-Rejection error: %v", err)
			}
			if rej.Reason == "" || rej.Stage != stage {
				t.Fatalf("incomplete rejection: %+v", rej)
			}
			return
		}
		if rec.Stage() != stage {
			t.Fatalf("stage %s record for stage %s", rec.Stage(), stage)
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("accepted record does not validate: %v", err)
		}
		line, err := Format(rec)
		if err != nil {
			t.Fatalf("accepted record does not format: %v", err)
		}
		again, err := Scan(stage, []byte(line))
		if err != nil {
			t.Fatalf("formatted record rejected: %v\n%s", err, line)
		}
		if !reflect.DeepEqual(rec, again) {
			t.Fatalf("round trip differs:\n%+v\n%+v", rec, again)
		}
	})
}
