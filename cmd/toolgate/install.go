package main

// This file is the registration line of the front doors. Each door
// package registers its kind (its front_doors.<name> section, off by
// default) from its init function, and one blank import here puts it in
// the binary; a section naming a door this binary does not import is a
// configuration error. The doors are added here as their packages land:
//
//	_ "github.com/toolgate/toolgate/gateway/frontdoor/tpmjs"
import (
	_ "github.com/toolgate/toolgate/gateway/frontdoor/agentspaces"
)
