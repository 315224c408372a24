package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"
)

func completionCommand(e *env) *ucli.Command {
	return &ucli.Command{
		Name:  "completion",
		Usage: "print the shell completion script (bash or zsh)",
		Description: `Examples:
   source <(nemorl-slurm completion bash)          # in ~/.bashrc
   nemorl-slurm completion zsh > "${fpath[1]}/_nemorl-slurm"`,
		ArgsUsage: "bash|zsh",
		Action: func(c *ucli.Context) error {
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(e.stdout, bashCompletion)
			case "zsh":
				fmt.Fprint(e.stdout, zshCompletion)
			default:
				return usageErr("completion: want bash or zsh, got %q", c.Args().First())
			}
			return nil
		},
	}
}

// The scripts ask the binary itself (urfave/cli's --generate-bash-completion)
// for the verbs and flags that fit what is typed.
const bashCompletion = `# nemorl-slurm bash completion
_nemorl_slurm() {
	local cur words
	cur="${COMP_WORDS[COMP_CWORD]}"
	words=("${COMP_WORDS[@]:0:COMP_CWORD}")
	if [[ "$cur" == -* ]]; then
		words+=("$cur")
	fi
	COMPREPLY=($(compgen -W "$("${words[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
	return 0
}
complete -o bashdefault -o default -F _nemorl_slurm nemorl-slurm
`

const zshCompletion = `#compdef nemorl-slurm
_nemorl_slurm() {
	local -a opts
	local cur="${words[-1]}"
	if [[ "$cur" == -* ]]; then
		opts=("${(@f)$(${words[@]:0:#words[@]-1} "$cur" --generate-bash-completion 2>/dev/null)}")
	else
		opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
	fi
	if [[ "${opts[1]}" != "" ]]; then
		_describe 'values' opts
	else
		_files
	fi
}
compdef _nemorl_slurm nemorl-slurm
`
