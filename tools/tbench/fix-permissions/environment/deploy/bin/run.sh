#!/bin/bash
here=$(dirname "$0")
"$here/check.sh" && echo "deploy ok"
