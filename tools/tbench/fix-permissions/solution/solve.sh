#!/bin/bash
cd /app/deploy
chmod 755 bin/*
chmod 644 config/*
chmod 600 config/secrets.env
chmod 750 . bin config
