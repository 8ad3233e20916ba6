# The system calls the compiled core waits and moves bytes with (sockets, poll, eventfd),
# declared once for Cython; read, write and close come from posix.unistd, errno from libc.errno.

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    int setsockopt(int fd, int level, int name, const void *value, unsigned int size)
    enum: SOL_SOCKET, SO_RCVLOWAT, MSG_NOSIGNAL, MSG_DONTWAIT


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum: POLLIN, POLLOUT


cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    enum: EFD_NONBLOCK, EFD_CLOEXEC
