// Command wavegate is wavegate's single binary: the manager (admission webhook and controllers)
// and its subcommands.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"wavegate.io/wavegate/pkg/cmd"
)

func main() {
	if err := cmd.New().ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(cmd.ExitCode(err))
	}
}
