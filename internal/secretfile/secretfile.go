// Package secretfile finds the files a configuration names as secrets, so
// that what a sandbox hides is derived from the configuration's types, not
// from a list kept by hand beside them.
//
// A configuration field that names a file holding a secret (a private key,
// a MAC or HMAC key, an OAuth client secret) carries the struct tag
// `secret:"file"`; one that names a file holding none (a certificate, a
// public key set, a rules file) carries `secret:"public"`. Find walks any
// configuration value by reflection and returns every secret file it names
// with its YAML key. Undeclared walks a configuration type and returns the
// file-naming fields (a YAML key "file", "…_file" or "…_files") that carry
// neither declaration, so that a test fails when a section grows a key
// file without saying what it holds.
package secretfile

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// The struct tag and its values.
const (
	// Tag is the struct tag's key.
	Tag = "secret"
	// File marks a field naming a file that holds a secret: a string, a
	// []string or a *string.
	File = "file"
	// Public declares a file-naming field whose file holds no secret.
	Public = "public"
)

// maxDepth bounds the walk: configurations are a few levels deep, and a
// value that nests deeper (a cycle through pointers) is not one.
const maxDepth = 32

// Path is a secret file the configuration names, and the YAML key that
// names it ("evidence.signing_key.file").
type Path struct {
	Key  string
	Path string
}

// Find returns every non-empty file name in v held by a field tagged
// `secret:"file"`, keyed below prefix. It follows pointers, interfaces,
// structs (by their YAML keys; ",inline" fields and untagged interface
// fields, which hold a section's kind-specific keys, at the level of their
// parent), maps (in key order) and slices; fields tagged yaml:"-" are not
// keys of the file and are skipped.
func Find(prefix string, v any) []Path {
	var out []Path
	find(prefix, reflect.ValueOf(v), 0, &out)
	return out
}

func find(key string, v reflect.Value, depth int, out *[]Path) {
	if !v.IsValid() || depth > maxDepth {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			find(key, v.Elem(), depth+1, out)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, ok := fieldKey(key, f)
			if !ok {
				continue
			}
			if f.Tag.Get(Tag) == File {
				*out = append(*out, files(name, v.Field(i))...)
				continue
			}
			find(name, v.Field(i), depth+1, out)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			find(join(key, fmt.Sprint(k)), v.MapIndex(k), depth+1, out)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			find(fmt.Sprintf("%s[%d]", key, i), v.Index(i), depth+1, out)
		}
	}
}

// files returns the file names a field tagged `secret:"file"` holds.
func files(key string, v reflect.Value) []Path {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	var out []Path
	switch {
	case v.Kind() == reflect.String && v.String() != "":
		out = append(out, Path{key, v.String()})
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		for i := range v.Len() {
			if s := v.Index(i).String(); s != "" {
				out = append(out, Path{fmt.Sprintf("%s[%d]", key, i), s})
			}
		}
	}
	return out
}

// fieldKey returns the YAML key of field f below parent, and false for a
// field that is not a key of the file (unexported and not embedded, or
// tagged yaml:"-").
func fieldKey(parent string, f reflect.StructField) (string, bool) {
	if !f.IsExported() && !f.Anonymous {
		return "", false
	}
	tag, hasTag := f.Tag.Lookup("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	switch {
	case name == "-":
		return "", false
	case slices.Contains(strings.Split(opts, ","), "inline"):
		return parent, true
	case !hasTag && f.Type.Kind() == reflect.Interface:
		return parent, true
	case name == "":
		name = strings.ToLower(f.Name)
	}
	return join(parent, name), true
}

// join appends a key to its parent's.
func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// Undeclared returns the keys, below prefix, of the fields of t (a struct
// type, or a pointer to one, and the struct types it holds) that name a
// file and declare neither `secret:"file"` nor `secret:"public"`, and of
// those whose secret tag is malformed or on a field that cannot hold a file
// name. Interface fields are not followed: their kinds are checked one by
// one.
func Undeclared(prefix string, t reflect.Type) []string {
	var out []string
	undeclared(prefix, t, map[reflect.Type]bool{}, &out)
	return out
}

func undeclared(key string, t reflect.Type, seen map[reflect.Type]bool, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		if t.Kind() == reflect.Map {
			key += ".*"
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := fieldKey(key, f)
		if !ok {
			continue
		}
		tag, tagged := f.Tag.Lookup(Tag)
		switch {
		case tagged && tag != File && tag != Public:
			*out = append(*out, fmt.Sprintf("%s: secret tag %q (want %q or %q)", name, tag, File, Public))
		case tagged && !namesFile(f.Type):
			*out = append(*out, fmt.Sprintf("%s: secret tag on a %s, not a file name", name, f.Type))
		case !tagged && namesFile(f.Type) && looksLikeFile(name):
			*out = append(*out, name)
		case !tagged:
			undeclared(name, f.Type, seen, out)
		}
	}
}

// namesFile reports whether a field of type t can hold file names.
func namesFile(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t.Kind() == reflect.String
}

// looksLikeFile reports whether the last element of key names a file.
func looksLikeFile(key string) bool {
	last := key[strings.LastIndex(key, ".")+1:]
	return last == "file" || last == "files" || strings.HasSuffix(last, "_file") || strings.HasSuffix(last, "_files")
}
