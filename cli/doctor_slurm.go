package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nemorl/nemorl-slurm/slurm"
	"github.com/nemorl/nemorl-slurm/templates"
)

// checkSlurmConfig is doctor's "slurm config" check: slurmctld's
// configuration read as an episode reads it (one scontrol show config,
// slurm.Client.Config, under KindScontrol's deadline): the KillWait
// written into every batch script (the jobs ask Slurm nothing for it), and
// MaxArraySize. sl runs its commands on the cluster (slurm.New(host)).
func checkSlurmConfig(ctx context.Context, sl *slurm.Client, add doctorAdd) {
	cfg, err := sl.Config(ctx)
	if late, ok := pastDeadline(err); ok {
		add("slurm config", "fail", "scontrol show config: "+late, pastDeadlineFix)
		return
	}
	if err != nil {
		add("slurm config", "fail", err.Error(), "episodes read KillWait with scontrol show config on the login node before they render their scripts: put scontrol on the PATH of a non-interactive login (module load slurm in ~/.bashrc)")
		return
	}
	kw := int(cfg.KillWait / time.Second)
	detail := fmt.Sprintf("KillWait %d s (written into the scripts: they wait %d s for a payload after TERM), MaxArraySize %d",
		kw, templates.TermWaitSeconds(cfg.KillWait), cfg.MaxArraySize)
	if kw < 2 {
		add("slurm config", "warn", detail+": Slurm kills a job's processes within "+strconv.Itoa(kw)+" s of its TERM, before the script can clean up after its payload (the next job's sweep removes its scratch directory)",
			"ask the admins for a KillWait of a few seconds or more (slurm.conf; Slurm's default is 30)")
		return
	}
	add("slurm config", "ok", detail, "")
}
