// scripts/bench-read.c: read a file once, start to end, into one page-aligned
// buffer by one method, and print GB/s and CPU s/GB (user+sys of this process).
// The measurement behind docs/performance.md "Reading a regular file".
//   cc -O2 -o /tmp/bench-read scripts/bench-read.c
//   /tmp/bench-read METHOD FILE BUF_KIB COLD
// METHOD: read | readseq (posix_fadvise SEQUENTIAL first) | mmap (MADV_SEQUENTIAL,
// memcpy into the buffer) | mmappop (MAP_POPULATE) | direct (O_DIRECT reads);
// COLD=1 drops FILE's pages first (posix_fadvise DONTNEED; no effect on tmpfs).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <time.h>
#include <errno.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
int main(int c,char**v){
  const char*m=v[1];const char*path=v[2];size_t bs=atol(v[3])<<10;int cold=atoi(v[4]);
  int fd=open(path,O_RDONLY);struct stat st;fstat(fd,&st);
  if(cold){posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED);}
  char*buf=0;posix_memalign((void**)&buf,4096,bs);memset(buf,0,bs);
  volatile unsigned long sink=0;size_t tot=0;
  double t0=now(),c0=cpu();
  if(!strcmp(m,"readseq")){posix_fadvise(fd,0,0,POSIX_FADV_SEQUENTIAL);m="read";}
  if(!strcmp(m,"read")||!strcmp(m,"direct")){
    if(!strcmp(m,"direct")){close(fd);fd=open(path,O_RDONLY|O_DIRECT);if(fd<0){perror("O_DIRECT");return 1;}}
    for(;;){ssize_t n=read(fd,buf,bs);if(n<0){perror("read");return 1;}if(n==0)break;tot+=n;sink+=buf[0];}
  } else if(!strcmp(m,"mmap")){
    char*p=mmap(0,st.st_size,PROT_READ,MAP_SHARED,fd,0);madvise(p,st.st_size,MADV_SEQUENTIAL);
    for(size_t o=0;o<(size_t)st.st_size;o+=bs){size_t n=st.st_size-o<bs?st.st_size-o:bs;memcpy(buf,p+o,n);tot+=n;sink+=buf[0];}
    munmap(p,st.st_size);
  } else if(!strcmp(m,"mmappop")){
    char*p=mmap(0,st.st_size,PROT_READ,MAP_SHARED|MAP_POPULATE,fd,0);
    for(size_t o=0;o<(size_t)st.st_size;o+=bs){size_t n=st.st_size-o<bs?st.st_size-o:bs;memcpy(buf,p+o,n);tot+=n;sink+=buf[0];}
    munmap(p,st.st_size);
  }
  double t=now()-t0,cc=cpu()-c0;
  printf("%s %s bs=%zuK cold=%d bytes=%zu wall=%.3f cpu=%.3f GB/s=%.2f cpu_s/GB=%.3f\n",v[1],path,bs>>10,cold,tot,t,cc,tot/t/1e9,cc/(tot/1e9));
  return 0;}
