package certs

import "encoding/base64"

var base64Std = base64.StdEncoding
