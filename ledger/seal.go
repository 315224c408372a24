package ledger

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nemorl/nemorl-slurm/rules"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Every ledger entry is sealed: it carries an HMAC-SHA256 of its whole
// content under a key kept beside the ledger (OutcomeKeyFile, 0600), and so
// does every cancel marker. A job that can reach the ledger (the tool run
// on a login node whose home the jobs share, under runtime none) could
// otherwise edit a final entry's reward and have `result` print it, point
// an unfinished entry's eval job id at an impostor job, or plant a cancel
// marker to turn its 0 into a masked sample. Load replaces an entry whose
// seal does not verify with an integrity_violation outcome
// (rules.ReasonLedgerTampered), so every view of the episode shows the alarm; a
// cancel marker whose seal does not verify is ignored.
//
// What this does not stop: a process that can read the key (same user, no
// container) can compute a valid seal. With a container runtime the jobs
// run --no-home --containall and see neither the ledger nor the key.

// OutcomeKeyFile is the seal key's file name in the ledger directory.
const OutcomeKeyFile = "outcome.key"

const sealContext = "nemorl-slurm ledger seal v1\n"

func (l *Ledger) keyPath() string { return filepath.Join(l.Dir, OutcomeKeyFile) }

// sealKey returns the ledger's seal key, making it (0600, O_EXCL) when
// create is set and it does not exist.
func (l *Ledger) sealKey(create bool) ([]byte, error) {
	p := l.keyPath()
	b, err := os.ReadFile(p)
	if err == nil {
		if len(b) != 64 {
			return nil, fmt.Errorf("ledger: seal key %s: %d bytes, want 64 hex digits", p, len(b))
		}
		k, err := hex.DecodeString(string(b))
		if err != nil {
			return nil, fmt.Errorf("ledger: seal key %s: %w", p, err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) || !create {
		return nil, fmt.Errorf("ledger: seal key: %w", err)
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("ledger: seal key: %w", err)
	}
	// Publish it whole: written and synced under a temporary name, then
	// linked to its name, which fails if another process got there first
	// (a reader never sees a partly written key).
	f, err := os.CreateTemp(l.Dir, ".outcome.key.*")
	if err != nil {
		return nil, fmt.Errorf("ledger: seal key: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(hex.EncodeToString(k))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return nil, fmt.Errorf("ledger: seal key: %w", err)
	}
	if err := os.Link(f.Name(), p); errors.Is(err, fs.ErrExist) {
		return l.sealKey(false) // another process made it first
	} else if err != nil {
		return nil, fmt.Errorf("ledger: seal key: %w", err)
	}
	return k, nil
}

// sealEntry computes the seal of an entry: an HMAC of its JSON with the
// seal left out. The entry is canonicalized (encoded, decoded, encoded) so
// that what Load decodes encodes to the same bytes.
func sealEntry(key []byte, e *Entry) (string, error) {
	c := *e
	c.Seal = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", err
	}
	var d Entry
	if err := json.Unmarshal(b, &d); err != nil {
		return "", err
	}
	if b, err = json.Marshal(&d); err != nil {
		return "", err
	}
	return mac(key, "entry", e.Episode, b), nil
}

func mac(key []byte, kind, episode string, data []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sealContext + kind + "\n" + episode + "\n"))
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

func sameMAC(a, b string) bool {
	x, err1 := hex.DecodeString(a)
	y, err2 := hex.DecodeString(b)
	return err1 == nil && err2 == nil && hmac.Equal(x, y)
}

// checkSeal verifies an entry's seal; a missing key, a missing seal or a
// mismatch is an error naming which.
func (l *Ledger) checkSeal(e *Entry) error {
	if e.Seal == "" {
		return errors.New("the entry carries no seal")
	}
	key, err := l.sealKey(false)
	if err != nil {
		return err
	}
	want, err := sealEntry(key, e)
	if err != nil {
		return err
	}
	if !sameMAC(e.Seal, want) {
		return errors.New("the entry does not match its seal: it was changed by something other than nemorl-slurm")
	}
	return nil
}

// tamperedOutcome is what Load shows instead of an outcome whose seal
// failed (the rules' ledger-seal row): no reward, masked, an alarm for the
// operator.
func tamperedOutcome(e *Entry, why error, path string) *rules.Outcome {
	o := &rules.Outcome{Episode: e.Episode, Isolation: e.Isolation, Dir: e.Dir, Jobs: map[stages.Stage]rules.JobSummary{}}
	if e.Outcome != nil && e.Outcome.Jobs != nil {
		o.Jobs, o.Decided = e.Outcome.Jobs, e.Outcome.Decided
	}
	dec := rules.Decide(&rules.Facts{Episode: e.Episode, SealBroken: fmt.Sprintf("ledger entry %s: %v; the recorded outcome is not trusted", path, why)})
	dec.Verdict.Apply(o)
	return o
}
