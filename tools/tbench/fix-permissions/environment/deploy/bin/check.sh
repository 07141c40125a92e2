#!/bin/bash
test -r "$(dirname "$0")/../config/app.conf"
