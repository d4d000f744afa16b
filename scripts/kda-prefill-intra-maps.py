#!/usr/bin/env python3
# kda_chunk_prefill intra-chunk kernel (src/ops/cuda/kda_chunk_prefill_intra.cuh): its shared-memory
# and workspace index maps for phases P3a .. P3c-2, copied by hand from the CUDA expressions, checked
# for both diagonal paths: within each barrier interval no shared float written by one thread is read
# or written by another (q and its overlay a / r included), ld and a's lower block triangle are
# written exactly once, and every workspace element the state kernel reads (Qg, Kg, Kd, dec, Aqk's
# lower block triangle) is written exactly once and nothing else. Run: python3 scripts/kda-prefill-intra-maps.py
# (it does not see the CUDA file: edit both together).
from collections import defaultdict
kC,kK,kB,kLdK,kLdC=64,128,16,132,68
Q=0; K=kC*kLdK; G=2*kC*kLdK; LD=3*kC*kLdK; BEND=LD+4*256; CF=BEND+4*128; BETA=CF+10*128; END=BETA+64
assert END*4==112896
A=lambda i,j: Q+i*kLdC+j
R=lambda J,r,c: Q+kC*kLdC+J*256+r*16+c
assert R(2,15,15) < K
def pair_i(p): return 1 if p==0 else 2 if p<3 else 3 if p<6 else p-6
def pair_j(p): return 0 if p==0 else p-1 if p<3 else p-3 if p<6 else p-6
class Phase:
    def __init__(s): s.r=defaultdict(set); s.w=defaultdict(set)
    def check(s,name):
        for addr,ws in s.w.items():
            assert len(ws)==1 or True
            others=(s.r.get(addr,set())|ws)
            assert len(others)<=1 or len(ws)==0, (name,addr,ws,s.r.get(addr))
def tc_job(ph,gw,pr,qk,warp,lane):
    I,J=pair_i(pr),pair_j(pr); tid=warp*32+lane
    g,t=lane//4,lane%4
    for ks in range(16):
        k0=8*ks
        for rr in (g,g+8):
            for cc in (k0+t,k0+t+4):
                ph.r[(Q if qk else K)+(kB*I+rr)*kLdK+cc].add(tid)
        ph.r[CF+pr*128+k0+t].add(tid); ph.r[CF+pr*128+k0+t+4].add(tid)
        for nt in range(2):
            ph.r[G+(kB*J+8*nt+g)*kLdK+k0+t].add(tid); ph.r[G+(kB*J+8*nt+g)*kLdK+k0+t+4].add(tid)
    for nt in range(2):
        for hf in range(2):
            i=kB*I+g+8*hf; j=kB*J+8*nt+2*t
            for jj in (j,j+1):
                if qk: gw[('aqk',i,jj)].append(tid)
                elif I==J:
                    ph.r[BETA+i].add(tid); ph.w[LD+I*256+(i-kB*I)*16+jj-kB*J].add(tid)
                else:
                    ph.r[BETA+i].add(tid); ph.w[A(i,jj)].add(tid)
def run(diag_mma):
    gw=defaultdict(list); written=set()
    # P3a
    ph=Phase()
    if not diag_mma:
        for warp in range(8):
            I=warp//2; ib=10 if warp%2 else 0; ie=16 if warp%2 else 10; base=I*kB
            for lane in range(32):
                tid=warp*32+lane
                for i in range(ie):
                    for e in range(4):
                        ph.r[K+(base+i)*kLdK+4*lane+e].add(tid); ph.r[G+(base+i)*kLdK+4*lane+e].add(tid)
                    if i>=ib:
                        for e in range(4): ph.r[Q+(base+i)*kLdK+4*lane+e].add(tid)
                        j=lane&15
                        if lane<16: ph.r[BETA+base+i].add(tid); ph.w[LD+I*256+i*16+j].add(tid)
                        else: gw[('aqk',base+i,base+j)].append(tid)
    ph.check('P3a'); written|=set(ph.w)
    # P3b
    ph=Phase()
    for warp in range(8):
        for lane in range(32):
            tid=warp*32+lane; d=4*lane
            for I in range(4):
                for u in range(2):
                    i=kB*I+warp+8*u
                    for e in range(4):
                        for base in (Q,K,G):
                            ph.r[base+i*kLdK+d+e].add(tid); ph.w[base+i*kLdK+d+e].add(tid)
                        for ws in ('qg','kg','kd'): gw[(ws,i,d+e)].append(tid)
            if warp==0:
                for e in range(4): gw[('dec',d+e)].append(tid)
    for x in range(256):
        for xx in range(x,10*128,256): ph.w[CF+xx].add(x)
    ph.check('P3b')
    # P3c-1
    ph=Phase()
    jobs1=14 if diag_mma else 6
    for warp in range(8):
        for job in range(warp,jobs1,8):
            for lane in range(32):
                if job<6: tc_job(ph,gw,job,True,warp,lane)
                else: tc_job(ph,gw,6+(job-6)//2,(job-6)%2!=0,warp,lane)
    ph.check('P3c-1'); written|=set(ph.w)
    ldw=[a for a in written if LD<=a<BEND]; assert sorted(ldw)==list(range(LD,LD+1024)), len(ldw)
    # P3c-2
    ph=Phase()
    for warp in range(8):
        for lane in range(32):
            tid=warp*32+lane
            if warp<6: tc_job(ph,gw,warp,False,warp,lane)
            else:
                I=2*(warp-6)+lane//16; base=I*kB; j=lane%16
                for i in range(16):
                    for m in range(i): ph.r[LD+I*256+i*16+m].add(tid)
                    ph.w[A(base+i,base+j)].add(tid)
    ph.check('P3c-2')
    aw=set(ph.w)
    exp=set(A(i,j) for i in range(64) for j in range(64) if j<16*(i//16+1))
    assert aw==exp, (len(aw),len(exp))
    for addr,ws in ph.w.items(): assert len(ws)==1
    # P4 scratch inside q's region and not over a
    assert max(exp) < R(0,0,0)
    # global coverage
    for key,v in gw.items(): assert len(v)==1,(key,v)
    expg=set([('qg',i,d) for i in range(64) for d in range(128)]+[('kg',i,d) for i in range(64) for d in range(128)]
             +[('kd',i,d) for i in range(64) for d in range(128)]+[('dec',d) for d in range(128)]
             +[('aqk',i,j) for i in range(64) for j in range(64) if j<16*(i//16+1)])
    assert set(gw)==expg, (len(gw),len(expg), list(set(gw)^expg)[:5])
    print('ok diag_mma=',diag_mma)
run(True); run(False)
