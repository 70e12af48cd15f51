package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/botbox/botbox/internal/localmode"
)

const usageExec = "botbox exec [-c PATH] [--log FILE] [--report] [--quiet] [--tcp-ports P,...] [--] CMD [ARGS...]"

// runExec is `botbox exec`: local mode (package localmode). Flags end at
// the first argument that is not one (or at "--"): what follows is the
// command's. ctx's cancellation is not a stop: the signals that cancel it
// are forwarded to the command, whose exit ends botbox exec.
func runExec(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := newFlagSet("botbox exec", stderr)
	setUsage(fs, usageExec)
	path := configFlag(fs)
	logPath := fs.String("log", "", "keep BotBox's log, decision lines included, in `FILE` (for botbox suggest --log FILE)")
	report := fs.Bool("report", false, "run the policy in report mode: denied requests are forwarded without credentials and logged as report_deny")
	quiet := fs.Bool("quiet", false, "print no summary on stderr at exit")
	var ports tcpPorts
	fs.Var(&ports, "tcp-ports", "more TCP `PORTS` (comma-separated) redirected to the plain HTTP listener, like port 80")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		return usageError(stderr, usageExec, "botbox exec: no command given")
	}
	st := localmode.Run(context.WithoutCancel(ctx), localmode.Options{
		ConfigPath: *path, LogPath: *logPath, Report: *report, Quiet: *quiet, TCPPorts: ports,
		Argv: fs.Args(), Environ: os.Environ(), Getenv: getenv,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Messages: stderr,
	})
	if st.Signal != 0 {
		localmode.Raise(st.Signal)
	}
	return st.Code
}

// tcpPorts is --tcp-ports (localmode.ParseTCPPorts); it may be given more
// than once.
type tcpPorts []uint16

func (p *tcpPorts) String() string { return localmode.FormatTCPPorts(*p) }

func (p *tcpPorts) Set(v string) error {
	ports, err := localmode.ParseTCPPorts(v, *p)
	if err != nil {
		return err
	}
	*p = ports
	return nil
}
