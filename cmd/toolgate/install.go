package main

// This file is the registration line of the front doors. Each door
// package registers its kind (its front_doors.<name> section, off by
// default) from its init function, and one blank import here puts it in
// the binary; a section naming a door this binary does not import is a
// configuration error.
import (
	// front_doors.agent_spaces: Agent Spaces operations batches.
	_ "github.com/toolgate/toolgate/gateway/frontdoor/agentspaces"
	// front_doors.mcp: the Model Context Protocol (Streamable HTTP).
	_ "github.com/toolgate/toolgate/gateway/frontdoor/mcp"
	// front_doors.tpmjs: the TPMJS executor protocol and registry search.
	_ "github.com/toolgate/toolgate/gateway/frontdoor/tpmjs"
)
