package apptainer

import (
	"fmt"
	"strings"
)

// The eval set is AIME 2025. NeMo RL ships loaders for it (the response
// dataset registry's "AIME2025" and the eval loader's "aime2025", both
// reading opencompass/AIME2025) and Gym prepare scripts that write it as
// JSONL (benchmarks/aime25: MathArena/aime_2025), so one config line such
// as `dataset_name: AIME2025` would train on the test set if the data could
// be reached. The train job has no network (--net --network none, and
// HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1 in the image), so the only way to
// reach it is a copy in the train image: the train image's %test fails when
// there is one (EvalSetImageCheck).

// EvalSetDatasets are the Hugging Face dataset ids of public AIME 2025
// copies: the ones NeMo RL and Gym load and the common mirrors.
var EvalSetDatasets = []string{
	"opencompass/AIME2025",    // NeMo RL: response_datasets aime25.py / aime.py, eval_datasets aime.py
	"MathArena/aime_2025",     // Gym benchmarks/aime25/prepare.py; the eval image's set
	"MathArena/aime_2025_I",   // the two papers of the MathArena set
	"MathArena/aime_2025_II",  //
	"HuggingFaceH4/aime_2025", // a Gym prepare script (math_with_judge data/aime25_validation.jsonl)
	"yentinglin/aime_2025",
	"math-ai/aime25",
	"TIGER-Lab/AIME25",
}

// EvalSetPathRegex matches (GNU find -regextype posix-extended -iregex,
// case-insensitive, the whole path) a path with a component that starts
// with "aime" after a character that is not a letter or digit and has "25"
// further in it: aime25.jsonl, aime_2025, AIME2025-I, opencompass___aime2025,
// datasets--MathArena--aime_2025, benchmarks/aime25/..., aime_2024_2025, and
// everything below such a directory; not claimed_2025 or aime24_*.
const EvalSetPathRegex = `.*[^a-z0-9]aime[^/]*25.*`

// evalSetRoots are the image's own trees the check walks: where the build
// installs (/opt), the system's trees and root's home, where a cache left by
// the build would be.
var evalSetRoots = []string{"/opt", "/usr", "/etc", "/var/cache", "/var/lib", "/root"}

// EvalSetSourceList is the train image's list of the pinned sources' files
// (every file of the NeMo RL, Gym and submodule archives, absolute paths),
// written by %post as it unpacks them.
const EvalSetSourceList = "/opt/nemorl/pins/source-files.txt"

// evalSetDataSuffixes are the names of data files: one of the pinned
// sources' own files that names the set is allowed unless it is one.
var evalSetDataSuffixes = []string{"*.jsonl", "*.jsonl.*", "*.json.gz", "*.parquet", "*.arrow", "*.csv", "*.tsv"}

// EvalSetCacheNames are the directory names the Hugging Face caches give the
// EvalSetDatasets: the hub's datasets--<org>--<name> and the datasets
// library's <org>___<name> (matched case-insensitively: the library lowers
// the name).
func EvalSetCacheNames() []string {
	var names []string
	for _, id := range EvalSetDatasets {
		org, name, _ := strings.Cut(id, "/")
		names = append(names, "datasets--"+org+"--"+name, org+"___"+name)
	}
	return names
}

// Markers of the generated block in train.def's %test.
const (
	evalSetBegin = "# BEGIN eval-set check: generated from apptainer/evalset.go (go test ./apptainer -update rewrites it)"
	evalSetEnd   = "# END eval-set check"
)

// EvalSetImageCheck is the block of train.def's %test (POSIX sh, indented
// as the section, with the section's fail function) that fails when the
// image holds a copy of the eval set:
//   - a Hugging Face cache directory of one of EvalSetDatasets, anywhere in
//     the image's trees;
//   - a file or symlink whose path matches EvalSetPathRegex, but Python
//     code (a loader, which fetches nothing offline) and, unless it is a
//     data file, one of the pinned sources' own files (EvalSetSourceList).
func EvalSetImageCheck() string {
	return evalSetCheck(evalSetRoots, EvalSetSourceList)
}

func evalSetCheck(roots []string, sourceList string) string {
	var iname []string
	for _, n := range EvalSetCacheNames() {
		iname = append(iname, "-iname '"+n+"'")
	}
	lines := []string{
		evalSetBegin,
		"# Train runs offline (--net --network none, HF_HUB_OFFLINE=1,",
		"# HF_DATASETS_OFFLINE=1): a config line such as dataset_name: AIME2025 can",
		"# load the eval set (AIME 2025) only from a copy in this image. There is none:",
		"# no Hugging Face cache of a copy (the hub's datasets--<org>--<name>, the",
		"# datasets library's <org>___<name>) and no file whose path names the set",
		"# (a component aime...25...) but Python code (a loader: offline it fetches",
		"# nothing) and the pinned sources' own files that are not data.",
		"evalset_roots=",
		"for r in " + strings.Join(roots, " ") + "; do",
		"    [ -d \"$r\" ] || continue",
		"    # a directory bound from the host (the builder's HOME) is not the image's",
		"    if awk -v d=\"$r\" '$5 == d { m = 1 } END { exit !m }' /proc/self/mountinfo; then continue; fi",
		"    evalset_roots=\"$evalset_roots $r\"",
		"done",
		"test -n \"$evalset_roots\" || fail \"eval-set check: none of " + strings.Join(roots, " ") + " to look in\"",
		"evalset_caches=$(find $evalset_roots -xdev \\( " + strings.Join(iname, " -o ") + " \\) -print) || fail \"eval-set check: find failed\"",
		"[ -z \"$evalset_caches\" ] || fail \"Hugging Face caches of the eval set in the image: $evalset_caches\"",
		"test -s " + sourceList + " || fail \"no " + sourceList + " (the pinned sources' files)\"",
		"evalset_hits=$(find $evalset_roots -xdev -regextype posix-extended \\( -type f -o -type l \\) -iregex '" + EvalSetPathRegex + "' -print) || fail \"eval-set check: find failed\"",
		"evalset_bad=$(printf '%s\\n' \"$evalset_hits\" | while IFS= read -r p; do",
		"    case $p in '' | *.py | *.pyc) continue ;; esac",
		"    case $p in",
		"        " + strings.Join(evalSetDataSuffixes, " | ") + ") ;;",
		"        *) if grep -qxF -- \"$p\" " + sourceList + "; then continue; fi ;;",
		"    esac",
		"    printf '%s\\n' \"$p\"",
		"done)",
		"[ -z \"$evalset_bad\" ] || fail \"files naming the eval set (AIME 2025) in the image: $evalset_bad\"",
		evalSetEnd,
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}
