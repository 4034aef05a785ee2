//go:build !linux

package main

import "errors"

func unixConnect(string) error              { return errors.New("unsupported") }
func setsidBeat(string) error               { return errors.New("unsupported") }
func attempt(string) error                  { return errors.New("unsupported") }
func chmodVia(string, string, string) error { return errors.New("unsupported") }
