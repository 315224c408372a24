package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nemorl/nemorl-slurm/internal/atomicfile"
)

// keyStore maps idempotency keys to episodes, one small file per key in a
// directory beside the ledger (serve/keys/), each replaced atomically and
// durably. The mapping is written before the episode is submitted, so a
// server killed at any point finds, on its next start, every episode a
// re-sent row may belong to; a mapping whose episode never reached the
// ledger is as good as absent.
type keyStore struct {
	dir string
	// scope is the config's absolute path: the same row served with
	// another config is another rollout.
	scope string
}

// keyRecord is one key's file.
type keyRecord struct {
	Key     string `json:"key"`
	Scope   string `json:"config_path"`
	Episode string `json:"episode"`
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

// get returns the episode mapped to key, or "".
func (k *keyStore) get(key string) (string, error) {
	b, err := os.ReadFile(k.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("serve keys: %w", err)
	}
	var r keyRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Key != key || r.Scope != k.scope {
		return "", fmt.Errorf("serve keys: %s: not this key's record", k.path(key))
	}
	return r.Episode, nil
}

// put maps key to episode, durably.
func (k *keyStore) put(key, ep string) error {
	b, err := json.Marshal(keyRecord{Key: key, Scope: k.scope, Episode: ep})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(k.path(key), b, 0o600); err != nil {
		return fmt.Errorf("serve keys: %w", err)
	}
	return nil
}

// drop removes key's mapping if it still names ep.
func (k *keyStore) drop(key, ep string) {
	if cur, err := k.get(key); err == nil && cur == ep {
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
