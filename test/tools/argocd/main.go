// Command argocd runs the real Argo CD application controller and repo server, and an in-process
// redis, for wavegate's local cluster (test/tools/dev/argocd.sh). It is built from the pinned Argo
// CD module into the user cache by test/tools/control-plane.sh; none of Argo CD's code lives here.
//
//	argocd application-controller <flags>   Argo CD's argocd-application-controller command
//	argocd repo-server <flags>              Argo CD's argocd-repo-server command
//	argocd redis <addr>                     an in-memory redis (miniredis) on a loopback address
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
	controller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: argocd application-controller|repo-server|redis [args]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	switch cmd {
	case "application-controller":
		c := controller.NewCommand()
		c.SetArgs(args)
		if err := c.Execute(); err != nil {
			os.Exit(1)
		}
	case "repo-server":
		c := reposerver.NewCommand()
		c.SetArgs(args)
		if err := c.Execute(); err != nil {
			os.Exit(1)
		}
	case "redis":
		addr := "127.0.0.1:6379"
		if len(args) > 0 {
			addr = args[0]
		}
		s := miniredis.NewMiniRedis()
		if err := s.StartAddr(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("redis listening on", s.Addr())
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		s.Close()
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", cmd)
		os.Exit(2)
	}
}
