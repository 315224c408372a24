#!/bin/bash
# nemorl capture: no final newline
true