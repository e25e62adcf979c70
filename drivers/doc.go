// Package drivers defines the interface between the gateway and the systems
// that actually execute tools. A driver knows nothing about policy or
// evidence: the gateway hands it a Call that has already been authorized and
// records whatever Result it returns.
//
// # The contract
//
// Every driver implements Driver (Run and Engine), and its kind registers a
// Config from its package's init function (Register). The gateway names no
// driver package: a program chooses its drivers by importing them (the
// toolgate binary imports drivers/builtin), and whatever the gateway needs
// to know of a driver beyond Run it asks through the optional interfaces
// below, never by the driver's type. drivers/driverstest checks a driver
// against the contract's invariants.
//
// # Optional interfaces
//
// A driver implements an interface only when it has the property; the
// gateway assumes the safe default otherwise. On the Driver, asked while
// calls run:
//
//   - Normalizer: the arguments name resources (files, packages) and have
//     a canonical form, which policy decides on and Run receives. Without
//     it arguments are decided on as given. A section (Config) whose
//     canonical forms depend on the arguments alone implements it too, so
//     dry runs (toolgate policy authorize) decide on the same arguments.
//   - Describer: the driver knows its targets' argument schemas, their
//     effects (Hints, for MCP annotations) and which argument carries the
//     caller's environment (treated as the call's secrets). Without it a
//     tool takes any object and claims nothing.
//   - Bounded: one Run can take at most MaxRunTime. Without it the
//     gateway's recovery assumes a run may last a long time before calling
//     it abandoned.
//   - Sealed: a run can affect nothing except through nested calls, so an
//     unfinished run may be discarded and run again. Without it a run is
//     never repeated. Only a driver that can vouch for its sandbox may
//     implement it.
//   - HealthReporter: the driver knows, from cached state, whether its
//     downstream is reachable (/readyz, metrics). Without it the driver
//     counts as healthy.
//   - io.Closer: the driver holds resources the gateway releases when it
//     closes.
//
// On the Config (a drivers.<name> section), asked while the configuration
// is checked and the gateway is built:
//
//   - ToolBinder: the section checks the tools entries naming it and says
//     what they bind to; it also checks a package registry's
//     "<package>::<export>" ids. Without it entries are taken as given.
//   - Publisher: the driver offers tools of its own, "<name>.<target>",
//     without tools entries.
//   - RegistryHost: the driver may serve any tool of a package registry by
//     a "<package>::<export>" id (at most one section may).
//   - HostUser: the section holds secrets (redacted from all evidence),
//     paths of the gateway's own (kept out of workspaces and sandboxes),
//     folders callers write, or a local trace folder.
//   - WorkspaceRooter: a command-line flag may replace the section's
//     workspace folder (toolgate serve --workspace).
//
// They are separate because each is asked at a different moment for a
// different purpose, and a driver has each property independently; what is
// asked together (a target's schema, hints and environment argument; a
// section's secrets and paths) is one interface.
package drivers
