package stages

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewID returns a unique episode id that sorts by creation time:
// ep-20261129T214501Z-3f9a1c2b.
func NewID(now time.Time) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("stages: crypto/rand failed: " + err.Error())
	}
	return "ep-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
