//go:build tools

// Package tools pins dependencies that packages under construction use;
// delete an import once a real package imports it.
package tools
import (
 _ "golang.org/x/crypto/ssh"
 _ "golang.org/x/crypto/ssh/agent"
 _ "golang.org/x/crypto/ssh/knownhosts"
 _ "golang.org/x/term"
 _ "github.com/pkg/sftp"
 _ "gopkg.in/yaml.v3"
 _ "github.com/urfave/cli/v2"
 _ "github.com/skeema/knownhosts"
 _ "github.com/kevinburke/ssh_config"
 _ "github.com/rogpeppe/go-internal/testscript"
)
