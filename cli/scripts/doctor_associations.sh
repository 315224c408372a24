#!/bin/sh
# doctor's "account" and "qos" checks, run on the login host as sh -c
# SCRIPT: the login user's associations, one ACCOUNT|QOS line each.
sacctmgr -n -P show assoc user="$(id -un)" format=account,qos
