// Package deploy holds what runs Toolgate on Kubernetes: the OCI image
// build (imagebuild, image), the Helm chart (helm/toolgate) and the
// package that renders and checks it (chart). It is a module of its own so
// that Helm, the Kubernetes API types and go-containerregistry stay out of
// the gateway's go.mod.
package deploy
