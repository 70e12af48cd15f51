// Package localmode is `botbox exec`: it runs one command confined to new
// user, network, mount, IPC and PID namespaces, as the invoking user, without
// root or setuid helpers, and serves BotBox's listeners inside the command's
// network namespace while BotBox itself stays in the host's and dials from
// there.
//
// Two processes share the work:
//
//   - the parent (Run, in BotBox's process) loads the configuration, makes
//     the run's interception CA and trust bundle, starts the helper, asks it
//     for every listening socket the server binds (Options.Listen and
//     Options.ListenPacket of package server), receives them over a Unix
//     socket pair (SCM_RIGHTS), serves them, forwards signals and the
//     terminal's job control, and prints the summary at exit;
//   - the helper (HelperMain, the same binary re-executed with
//     HelperCommand as its only argument) is PID 1 of the new PID namespace
//     and the mapped user in the new user namespace, with the capabilities
//     that namespace grants: it brings loopback up, routes every address to
//     it, installs the nftables rules that redirect TCP 80/443 (and
//     --tcp-ports) to the listeners and DNS to the DNS guard and drop the
//     rest, covers the secrets, the CA key and the config with empty mounts,
//     mounts /proc for its PID namespace, creates the listening sockets on
//     request, and finally starts the command with no capability, no new
//     privileges and its own process group (the terminal's foreground one),
//     reaps it and reports its exit status.
//
// The namespace has loopback only: no packet of the command can leave it
// except through a socket BotBox holds, whatever the rules say; the rules
// make that transparent (redirects) and make what is refused fail fast.
//
// docs/local.md explains the design, its limits and what stays reachable.
package localmode
