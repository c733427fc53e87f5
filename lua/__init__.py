"""The Lua scripts, shipped as the package data of ``scheduler.lua``."""
