package configs

import "fmt"

func fmtSprintf(f string, v any) string { return fmt.Sprintf(f, v) }
