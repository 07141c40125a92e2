import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, tfd = int(sys.argv[1]), int(sys.argv[2])
pfd = libc.syscall(434, pid, 0)
print("pidfd_open", pfd, os.strerror(ctypes.get_errno()) if pfd < 0 else "")
fd = libc.syscall(438, pfd, tfd, 0)
print("pidfd_getfd", fd, os.strerror(ctypes.get_errno()) if fd < 0 else "")
if fd >= 0:
    os.write(fd, b"written from inside the sandbox\n"); print("wrote")
