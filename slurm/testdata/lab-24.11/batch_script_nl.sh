#!/bin/bash
# nemorl capture: final newline
true
