package main

import (
	"github.com/spf13/cobra"
)

const completionLong = `Print a shell completion script for rlctl.

  bash:  source <(rlctl completion bash)
  zsh:   rlctl completion zsh > "${fpath[1]}/_rlctl"
  fish:  rlctl completion fish > ~/.config/fish/completions/rlctl.fish
  powershell: rlctl completion powershell | Out-String | Invoke-Expression`

func newCompletionCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh|fish|powershell",
		Short:     "Print a shell completion script",
		Long:      completionLong,
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			}
			return root.GenPowerShellCompletionWithDesc(out)
		},
	}
}
