package stages

// The episode directory's files and directories, relative to it (Script
// and Output are the stages' batch scripts and their output). The trusted
// scripts, the engine and the collector all name them from here.

// Bundle is a stage's bundle directory: its settings, its payload (unless
// the stage's command replaces it) and the isolation guard.
func Bundle(stage Stage) string { return string(stage) + "/bundle" }

// BundleFile is the file name of a stage's bundle.
func BundleFile(stage Stage, name string) string { return Bundle(stage) + "/" + name }

// The names of the files the stages hand on.
const (
	PatchName    = "change.diff"       // the author's patch
	ResponseName = "response.json"     // the author's response
	WeightsName  = "model.safetensors" // train's weights
)

// The stages' inputs and outputs.
const (
	PromptFile    = string(Author) + "/prompt.txt"      // the author's task prompt
	SecretsFile   = string(Author) + "/secrets.env"     // the policy key, written at staging, read once
	PatchFile     = string(Author) + "/" + PatchName    // the author's patch, train's and eval's input
	ResponseFile  = string(Author) + "/" + ResponseName // the author's response
	CheckpointDir = string(Train) + "/checkpoint"       // train's output directory
	WeightsFile   = CheckpointDir + "/" + WeightsName   // train's weights, eval's input
	EvalWorkDir   = string(Eval) + "/work"              // eval's output directory
)
