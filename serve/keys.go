package serve

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nemorl/nemorl-slurm/internal/atomicfile"
)

// keyStore maps rollout identities to episodes, one small file per key in
// a directory beside the ledger (serve/keys/), each replaced atomically and
// durably. The mapping is written before the episode is submitted, so a
// server killed at any point finds, on its next start, every episode a
// re-sent row may belong to; a mapping whose episode never reached the
// ledger is as good as absent. A key's record also says when its
// episode's outcome was handed to a caller (Delivered): from then on the
// key's next request is a new rollout, never that outcome again.
type keyStore struct {
	dir string
	// scope is the config's absolute path and the policy's identity: the
	// same row served with another config or another policy is another
	// rollout.
	scope string
}

// keyRecord is one key's file.
type keyRecord struct {
	Key     string `json:"key"`
	Scope   string `json:"scope"`
	Episode string `json:"episode"`
	// Delivered is when the episode's outcome was written in full to an
	// open connection; zero while it never was.
	Delivered time.Time `json:"delivered,omitzero"`
}

func openKeyStore(ledgerDir, scope string) (*keyStore, error) {
	dir := filepath.Join(ledgerDir, "serve", "keys")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("serve keys: %w", err)
	}
	return &keyStore{dir: dir, scope: scope}, nil
}

func (k *keyStore) path(key string) string {
	sum := sha256.Sum256([]byte(k.scope + "\x00" + key))
	return filepath.Join(k.dir, hex.EncodeToString(sum[:])+".json")
}

// get returns key's record, or nil.
func (k *keyStore) get(key string) (*keyRecord, error) {
	b, err := os.ReadFile(k.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("serve keys: %w", err)
	}
	var r keyRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Key != key || r.Scope != k.scope {
		return nil, fmt.Errorf("serve keys: %s: not this key's record", k.path(key))
	}
	return &r, nil
}

func (k *keyStore) write(r keyRecord) error {
	r.Scope = k.scope
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(k.path(r.Key), b, 0o600); err != nil {
		return fmt.Errorf("serve keys: %w", err)
	}
	return nil
}

// put maps key to a new episode (not yet delivered), durably.
func (k *keyStore) put(key, ep string) error {
	return k.write(keyRecord{Key: key, Episode: ep})
}

// deliver records that ep's outcome is being handed to a caller of key
// (at, or zero to take that back when the write failed). It is a no-op
// when key no longer names ep.
func (k *keyStore) deliver(key, ep string, at time.Time) error {
	r, err := k.get(key)
	if err != nil || r == nil || r.Episode != ep {
		return err
	}
	r.Delivered = at
	return k.write(*r)
}

// drop removes key's mapping if it still names ep.
func (k *keyStore) drop(key, ep string) {
	if r, err := k.get(key); err == nil && r != nil && r.Episode == ep {
		_ = os.Remove(k.path(key))
	}
}

// all returns every mapping of this scope: key → episode.
func (k *keyStore) all() (map[string]string, error) {
	ents, err := os.ReadDir(k.dir)
	if err != nil {
		return nil, fmt.Errorf("serve keys: %w", err)
	}
	out := map[string]string{}
	for _, de := range ents {
		if !strings.HasSuffix(de.Name(), ".json") || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(k.dir, de.Name()))
		if err != nil {
			continue
		}
		var r keyRecord
		if json.Unmarshal(b, &r) == nil && r.Scope == k.scope && r.Episode != "" {
			out[r.Key] = r.Episode
		}
	}
	return out, nil
}

// answerLog is serve's own record of the /run answers it wrote, one JSON
// line each, and of each /aggregate_metrics call, in a file per scope
// beside the keys (serve/answers-<scope>.jsonl). Gym aggregates only the
// rows of its main file, never the masked ones it routed to its failures
// file: /aggregate_metrics reads here what this serve answered since the
// previous aggregation (a collection's rows, when one collection at a time
// uses the server).
type answerLog struct {
	mu   sync.Mutex
	path string
}

// answerLine is one line of the log.
type answerLine struct {
	At time.Time `json:"at"`
	// Kind is "answer" or "aggregate".
	Kind    string `json:"kind"`
	Episode string `json:"episode,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Class is the _ng_failure_class the answer carried ("" when scored
	// or a policy failure).
	Class  string `json:"class,omitempty"`
	Status int    `json:"status,omitempty"`
}

func openAnswerLog(ledgerDir, scope string) (*answerLog, error) {
	dir := filepath.Join(ledgerDir, "serve")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("serve answers: %w", err)
	}
	sum := sha256.Sum256([]byte(scope))
	return &answerLog{path: filepath.Join(dir, "answers-"+hex.EncodeToString(sum[:8])+".jsonl")}, nil
}

func (l *answerLog) add(a answerLine) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("serve answers: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("serve answers: %s: %w", l.path, werr)
	}
	return nil
}

// sinceLastAggregate returns the answers written after the last
// aggregation on record, and records this one.
func (l *answerLog) sinceLastAggregate(now time.Time) ([]answerLine, error) {
	l.mu.Lock()
	var out []answerLine
	f, err := os.Open(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		l.mu.Unlock()
		return nil, fmt.Errorf("serve answers: %w", err)
	default:
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var a answerLine
			if json.Unmarshal(sc.Bytes(), &a) != nil {
				continue // a line cut by a crash
			}
			if a.Kind == "aggregate" {
				out = out[:0]
				continue
			}
			out = append(out, a)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("serve answers: %s: %w", l.path, err)
		}
	}
	l.mu.Unlock()
	return out, l.add(answerLine{At: now, Kind: "aggregate"})
}
