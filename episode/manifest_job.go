package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/stages"
)

// ManifestJobWait is how long a job id that the episode's manifest on the
// cluster names as a stage's, and that Slurm does not know while both
// sacct and squeue answer, holds that stage's next sbatch back.
//
// The submit command (scripts/submit.sh, batch.sh) writes the new job's id
// into the manifest on the cluster as soon as sbatch answers, whether or
// not the tool lives to read the answer. A tool that comes back to an
// intent without its id looks for the job by name and tag (sacct, squeue);
// but slurmctld forgets an ended job after MinJobAge while slurmdbd may
// not have its record yet (it lags by seconds, by minutes after an
// outage: TestFaultLab/slurmdbd-outage ran train twice on that). The id
// in the manifest says the job was made: the stage waits until Slurm
// answers for it. The manifest is the user's file, so the policy can write
// an id there; one Slurm never answers for is dropped after this long and
// the stage submitted again: a planted id delays the episode, never masks
// it.
const ManifestJobWait = 10 * time.Minute

// manifestJobID is the job id that manifest b names for stage: "" when it
// names none, or something that is not a job or array task id (only the
// policy writes that).
func manifestJobID(b []byte, stage stages.Stage) string {
	var m struct {
		Jobs map[stages.Stage]string `json:"jobs"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	id := m.Jobs[stage]
	if !slurm.ValidJobID(id) {
		return ""
	}
	return id
}

// manifestJob is what Slurm says of the job the episode's manifest on the
// cluster names as stage's, for adopt when its look-up by name and tag
// found nothing: nil when the manifest names none (or a retired attempt's
// job, or one Slurm has not known for ManifestJobWait), an error while
// Slurm does not answer for it.
func (sb *submitter) manifestJob(ctx context.Context, e *ledger.Entry, stage stages.Stage, retired []string) (*slurm.JobInfo, error) {
	p := path.Join(e.Dir, ManifestFile)
	b, err := sb.host.ReadFile(ctx, p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("episode %s: read %s for the %s job's id before submitting it again: %w", e.Episode, p, stage, err)
	}
	id := manifestJobID(b, stage)
	if id == "" || slices.Contains(retired, id) {
		return nil, nil
	}
	infos, err := sb.slurm.Query(ctx, []string{id})
	if err != nil {
		return nil, fmt.Errorf("episode %s: %s: ask Slurm about job %s, which %s names: %w", e.Episode, stage, id, p, err)
	}
	key := e.Episode + "/" + string(stage) + "/" + id
	sb.unknownMu.Lock()
	defer sb.unknownMu.Unlock()
	j := infos[id]
	switch j.Source {
	case slurm.SourceNone: // both answered, neither knows it
	case slurm.SourceUnanswered:
		return nil, fmt.Errorf("episode %s: %s: %s names job %s and Slurm did not answer for it (sacct and squeue failed): not submitted again", e.Episode, stage, p, id)
	default:
		delete(sb.unknownSince, key)
		return &j, nil
	}
	now := sb.now()
	first, seen := sb.unknownSince[key]
	if !seen {
		if sb.unknownSince == nil {
			sb.unknownSince = map[string]time.Time{}
		}
		sb.unknownSince[key], first = now, now
	}
	if now.Sub(first) >= ManifestJobWait {
		delete(sb.unknownSince, key)
		sb.logf("%s: %s: %s names job %s, which Slurm has not known for %s: submitting the stage again", e.Episode, stage, p, id, ManifestJobWait)
		return nil, nil
	}
	return nil, fmt.Errorf("episode %s: %s: %s names job %s, which Slurm does not know yet (slurmdbd lags the jobs slurmctld forgot): not submitted again until Slurm answers for it, or for %s",
		e.Episode, stage, p, id, ManifestJobWait-now.Sub(first).Round(time.Second))
}
