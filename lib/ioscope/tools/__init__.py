"""One package per tool (cmd.py: its command line; its own collector/model/view where no other tool
shares them). A tool imports engines/, capture/, kernel/, base/ and tools/common.py, never another tool."""
