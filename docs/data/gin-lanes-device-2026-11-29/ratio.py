import re,sys,math
s=open(sys.argv[1]).read()
vals={}
for r in s.split('## round ')[1:]:
    rn=r.split('\n')[0]
    for block in r.split('### ')[1:]:
        name=block.split(':')[0]
        prov='shm' if 'shm' in name else 'tcp'; L=name.split('=')[-1]
        rows=re.findall(r'^ +(8|64K|1M|16M) +\d+ \|(.*)$', block, re.M)
        n=len(rows)//2
        for i,x in enumerate(rows):
            kind='pp' if i<n else 'a2a'
            v=float(x[1].split('|')[0].split()[1 if kind=='pp' else 0])
            vals[(rn,prov,kind,x[0],L)]=v
out={}
for (rn,prov,kind,size,L),v in vals.items():
    if L!='4' or size=='16M': continue
    out.setdefault((prov,kind),[]).append(v/vals[(rn,prov,kind,size,'1')])
for k,l in sorted(out.items()):
    g=math.exp(sum(map(math.log,l))/len(l)); print(k, 'geomean L4/L1 time %.3f'%g, 'n=%d'%len(l))
