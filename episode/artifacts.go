package episode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/stages"
)

// Author output files, relative to the episode directory.
const (
	ResponseFile = stages.ResponseFile
	PatchFile    = stages.PatchFile
)

// AuthorFiles reads the author's response.json and change.diff from the
// cluster (serve answers with them). Each is read only when it is a regular
// file within its bound (a FIFO or a symlink to /dev/zero is never opened)
// and, once the author record was verified, only as the record names it
// (its sha256); a file that is absent or fails a check comes back nil, with
// why in problems. err is a failure to reach the cluster.
func (d *Driver) AuthorFiles(ctx context.Context, e *ledger.Entry) (response, patch []byte, problems []string, err error) {
	return d.parts().collector.authorFiles(ctx, e)
}

// authorFiles is AuthorFiles: the response and the patch, each read
// only when it passes its checks.
func (c *collector) authorFiles(ctx context.Context, e *ledger.Entry) (response, patch []byte, problems []string, err error) {
	var wantResp, wantPatch string
	if e.Author != nil {
		wantResp, wantPatch = e.Author.ResponseSHA256, e.Author.PatchSHA256
	}
	read := func(rel string, limit int64, want string) ([]byte, error) {
		p := path.Join(e.Dir, rel)
		fi, err := c.lstat(ctx, p)
		if err != nil {
			return nil, err
		}
		switch {
		case !fi.Exists:
			problems = append(problems, rel+": missing")
			return nil, nil
		case !fi.Regular():
			problems = append(problems, fmt.Sprintf("%s: not a regular file (%s)", rel, fi.Type))
			return nil, nil
		case fi.Size > limit:
			problems = append(problems, fmt.Sprintf("%s: %d bytes, over %d", rel, fi.Size, limit))
			return nil, nil
		}
		b, err := c.host.ReadTail(ctx, p, fi.Size) // never more than checked
		if err != nil {
			return nil, fmt.Errorf("episode %s: read %s: %w", e.Episode, p, err)
		}
		if int64(len(b)) > limit {
			problems = append(problems, fmt.Sprintf("%s: over %d bytes", rel, limit))
			return nil, nil
		}
		if want != "" {
			sum := sha256.Sum256(b)
			if got := hex.EncodeToString(sum[:]); got != want {
				problems = append(problems, fmt.Sprintf("%s: sha256 %s, the author record says %s", rel, got, want))
				return nil, nil
			}
		}
		return b, nil
	}
	if response, err = read(ResponseFile, stages.MaxResponseBytes, wantResp); err != nil {
		return nil, nil, problems, err
	}
	if patch, err = read(PatchFile, stages.MaxPatchBytes, wantPatch); err != nil {
		return nil, nil, problems, err
	}
	return response, patch, problems, nil
}
