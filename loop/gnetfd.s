// This file is empty on purpose: a package with an assembly file may declare
// functions without a body, which gnetfd.go's go:linkname declarations are.
